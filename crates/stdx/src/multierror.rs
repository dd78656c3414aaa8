//! Several errors in one message, as hashicorp/go-multierror renders them: Nomad's job
//! validation and Vault's kv v2 input checks join their problems with it, and clients show the
//! text as is.
//!
//! Invariant: the layout is go-multierror's `ListFormatFunc` byte for byte.

/// `1 error occurred:\n\t* a\n\n`, `2 errors occurred:\n\t* a\n\t* b\n\n`.
pub fn render(errors: &[String]) -> String {
    let noun = if errors.len() == 1 { "error" } else { "errors" };
    let mut out = format!("{} {noun} occurred:\n", errors.len());
    for error in errors {
        out.push_str("\t* ");
        out.push_str(error);
        out.push('\n');
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_go_multierror() {
        assert_eq!(render(&["a".to_owned()]), "1 error occurred:\n\t* a\n\n");
        assert_eq!(
            render(&["a".to_owned(), "b".to_owned()]),
            "2 errors occurred:\n\t* a\n\t* b\n\n"
        );
    }
}
