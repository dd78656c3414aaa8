//! PostgreSQL's `key=value` connection strings (libpq's "conninfo" form, which Vault's
//! PostgreSQL plugin accepts beside URLs: `host=db.internal port=5432 user={{username}}
//! password={{password}} dbname=app sslmode=require`), turned into sqlx's connect options.
//!
//! Where it sits: `plugins::connect` calls [`options`] for a PostgreSQL `connection_url` that is
//! not a `postgres://` / `postgresql://` URL, after `{{username}}`/`{{password}}` templating.
//!
//! Invariants: the grammar is libpq's: `key = value` pairs separated by whitespace, spaces
//! allowed around `=`, a value either single-quoted (`\'` and `\\` escape inside) or a run of
//! non-space characters (a backslash escapes the next one); an unknown key, a key without
//! `=`, an unterminated quote or a bad port is a clear error, never a guess; error messages
//! never contain the password.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// Whether `url` is in the `key=value` form rather than a URL.
pub(crate) fn is_conninfo(url: &str) -> bool {
    !url.contains("://") && url.contains('=')
}

/// The connect options of a `key=value` string, or what is wrong with it.
pub(crate) fn options(conninfo: &str) -> Result<PgConnectOptions, String> {
    let mut options = PgConnectOptions::new_without_pgpass();
    for (key, value) in pairs(conninfo)? {
        options = match key.as_str() {
            "host" | "hostaddr" => options.host(&value),
            "port" => options.port(
                value
                    .parse::<u16>()
                    .map_err(|_| format!("invalid port {value:?}"))?,
            ),
            "user" => options.username(&value),
            "password" => options.password(&value),
            "dbname" => options.database(&value),
            "sslmode" => options.ssl_mode(
                PgSslMode::from_str(&value).map_err(|_| format!("invalid sslmode {value:?}"))?,
            ),
            "sslrootcert" => options.ssl_root_cert(value.as_str()),
            "sslcert" => options.ssl_client_cert(value.as_str()),
            "sslkey" => options.ssl_client_key(value.as_str()),
            "application_name" => options.application_name(&value),
            "options" => options.options(run_time_settings(&value)?),
            // Accepted and left to sqlx's defaults, as the Go driver does with what it ignores.
            "connect_timeout" | "client_encoding" => options,
            other => return Err(format!("unknown connection parameter {other:?}")),
        };
    }
    Ok(options)
}

/// `conninfo` as read back: a literal `password` value replaced by `xxxxx` (a templated
/// `{{password}}` and anything unparsable are shown as written).
pub(crate) fn redacted(conninfo: &str) -> String {
    let Ok(pairs) = pairs(conninfo) else {
        return conninfo.to_owned();
    };
    if !pairs
        .iter()
        .any(|(key, value)| key == "password" && !value.is_empty() && value != "{{password}}")
    {
        return conninfo.to_owned();
    }
    let shown: Vec<String> = pairs
        .iter()
        .map(|(key, value)| match key.as_str() {
            "password" => "password=xxxxx".to_owned(),
            _ if value.is_empty() || value.contains([' ', '\\', '\'']) => {
                format!(
                    "{key}='{}'",
                    value.replace('\\', "\\\\").replace('\'', "\\'")
                )
            }
            _ => format!("{key}={value}"),
        })
        .collect();
    shown.join(" ")
}

/// libpq's `options` value (`-c search_path=app -c statement_timeout=5s`, or `--name=value`)
/// as the run-time settings sqlx sends at start-up.
fn run_time_settings(value: &str) -> Result<Vec<(String, String)>, String> {
    let mut settings = Vec::new();
    let mut words = value.split_whitespace();
    while let Some(word) = words.next() {
        let setting = match word {
            "-c" => words.next().unwrap_or_default(),
            _ => word
                .strip_prefix("--")
                .or_else(|| word.strip_prefix("-c"))
                .unwrap_or_default(),
        };
        let Some((name, value)) = setting.split_once('=') else {
            return Err(format!("invalid options {value:?}: expected -c name=value"));
        };
        settings.push((name.replace('-', "_"), value.to_owned()));
    }
    Ok(settings)
}

/// The `key=value` pairs in order, unquoted and unescaped.
fn pairs(conninfo: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("missing \"=\" after {key:?}"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted value of {key:?}")),
                    Some('\'') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(format!("unterminated quoted value of {key:?}")),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_split_on_whitespace_with_spaces_around_equals() {
        let got = pairs("host=db port = 5432\tuser=app  dbname=test").unwrap();
        let want = [
            ("host", "db"),
            ("port", "5432"),
            ("user", "app"),
            ("dbname", "test"),
        ];
        assert_eq!(got.len(), want.len());
        for ((k, v), (wk, wv)) in got.iter().zip(want) {
            assert_eq!((k.as_str(), v.as_str()), (wk, wv));
        }
    }

    #[test]
    fn quoted_values_keep_spaces_and_unescape_quotes_and_backslashes() {
        let got = pairs(r"password='it''s' x=1").unwrap_err();
        assert!(got.contains("missing"), "{got}");
        let got = pairs(r"password='a b\'c\\d' user=u").unwrap();
        assert_eq!(got[0].1, r"a b'c\d");
        assert_eq!(got[1], ("user".to_owned(), "u".to_owned()));
        assert_eq!(pairs("password=''").unwrap()[0].1, "");
    }

    #[test]
    fn malformed_strings_are_refused_with_the_key_named() {
        assert!(pairs("host").unwrap_err().contains("\"host\""));
        assert!(
            pairs("password='open")
                .unwrap_err()
                .contains("unterminated")
        );
        assert!(options("port=fifty").unwrap_err().contains("invalid port"));
        assert!(
            options("sslmode=sometimes")
                .unwrap_err()
                .contains("sslmode")
        );
        assert!(options("colour=blue").unwrap_err().contains("unknown"));
    }

    #[test]
    fn options_become_run_time_settings() {
        let got =
            run_time_settings("-c search_path=app --statement-timeout=5s -cwork_mem=4MB").unwrap();
        let want = [
            ("search_path", "app"),
            ("statement_timeout", "5s"),
            ("work_mem", "4MB"),
        ];
        assert_eq!(got.len(), 3);
        for ((k, v), (wk, wv)) in got.iter().zip(want) {
            assert_eq!((k.as_str(), v.as_str()), (wk, wv));
        }
        assert!(run_time_settings("-c nothing").is_err());
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = options("password=hunter2 bogus=1").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn a_literal_password_is_redacted_and_a_template_is_not() {
        assert_eq!(
            redacted("host=db user=app password='s3 cret' dbname=x"),
            "host=db user=app password=xxxxx dbname=x"
        );
        let templated = "host=db user={{username}} password={{password}}";
        assert_eq!(redacted(templated), templated);
    }

    #[test]
    fn only_strings_without_a_scheme_are_conninfo() {
        assert!(is_conninfo("host=127.0.0.1 user=postgres"));
        assert!(!is_conninfo("postgresql://u:p@h/db?sslmode=disable"));
        assert!(!is_conninfo("not a connection string"));
    }
}
