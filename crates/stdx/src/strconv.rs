//! Go's `strconv.ParseBool`, which Vault, Consul and Nomad use for boolean parameters.
//!
//! Invariant: exactly Go's spellings are accepted (`1 t T TRUE true True` and
//! `0 f F FALSE false False`); anything else is `None`, which services answer with a 400.

/// Parses a boolean the way Go's `strconv.ParseBool` does.
pub fn parse_bool(raw: &str) -> Option<bool> {
    match raw {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_bool_accepts_every_go_spelling() {
        for raw in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(raw), Some(true), "{raw}");
        }
        for raw in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(raw), Some(false), "{raw}");
        }
    }

    #[test]
    fn parse_bool_rejects_other_spellings() {
        for raw in ["", "yes", "tRUE", "2", " true", "on"] {
            assert_eq!(parse_bool(raw), None, "{raw:?}");
        }
    }
}
