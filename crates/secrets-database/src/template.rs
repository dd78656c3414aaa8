//! Username templates, as Vault's `sdk/helper/template`: a Go-template subset over
//! `.DisplayName` and `.RoleName`, e.g. the PostgreSQL default
//! `{{ printf "v-%s-%s-%s-%s" (.DisplayName | truncate 8) (.RoleName | truncate 8) (random 20) (unix_time) | truncate 63 }}`.
//!
//! Supported: literal text; `{{ pipeline }}` where a pipeline is commands joined by `|` (the
//! previous value becomes the last argument); operands are string literals, integers,
//! `.DisplayName`, `.RoleName` and parenthesised pipelines; functions `printf` (`%s`, `%d`,
//! `%%`), `truncate N`, `truncate_sha256 N`, `uppercase`, `lowercase`, `replace OLD NEW`,
//! `sha256`, `base64`, `random N` (alphanumerics), `unix_time`, `unix_time_millis`, `uuid`.
//!
//! Invariant: pure apart from the random source and the `now` it is given; a template is
//! checked when a connection is written, so a bad one is a 400 there, never at issue time.

use aws_lc_rs::digest;
use base64::Engine as _;
use rand::Rng;

/// What a template may read.
#[derive(Debug, Clone, Default)]
pub(crate) struct UsernameMetadata {
    pub(crate) display_name: String,
    pub(crate) role_name: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Str(String),
    Num(i64),
    Field(String),
    Ident(String),
    Pipe,
    Open,
    Close,
}

/// Renders `template` for `meta` at `now_ms`.
pub(crate) fn render(
    template: &str,
    meta: &UsernameMetadata,
    now_ms: i64,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| "unclosed action in template".to_owned())?;
        let action = after[..end].trim_matches(|c: char| c == '-' || c.is_whitespace());
        let tokens = lex(action)?;
        let mut pos = 0;
        let value = pipeline(&tokens, &mut pos, meta, now_ms)?;
        if pos != tokens.len() {
            return Err(format!("unexpected {:?} in template", tokens[pos]));
        }
        out.push_str(&value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn lex(action: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = action.chars().collect();
    let mut i = 0;
    let mut tokens = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' => i += 1,
            '|' => {
                tokens.push(Token::Pipe);
                i += 1;
            }
            '(' => {
                tokens.push(Token::Open);
                i += 1;
            }
            ')' => {
                tokens.push(Token::Close);
                i += 1;
            }
            '"' | '`' => {
                let quote = c;
                let mut s = String::new();
                i += 1;
                loop {
                    let Some(&ch) = chars.get(i) else {
                        return Err("unterminated string in template".to_owned());
                    };
                    i += 1;
                    if ch == quote {
                        break;
                    }
                    if ch == '\\' && quote == '"' {
                        let next = chars.get(i).copied().unwrap_or('\\');
                        i += 1;
                        s.push(match next {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                    } else {
                        s.push(ch);
                    }
                }
                tokens.push(Token::Str(s));
            }
            '.' => {
                let start = i + 1;
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                tokens.push(Token::Field(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_digit() || c == '-' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                tokens.push(Token::Num(
                    text.parse()
                        .map_err(|_| format!("bad number {text:?} in template"))?,
                ));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                tokens.push(Token::Ident(chars[start..i].iter().collect()));
            }
            other => return Err(format!("unexpected {other:?} in template")),
        }
    }
    Ok(tokens)
}

#[derive(Debug, Clone)]
enum Value {
    Str(String),
    Num(i64),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Num(n) => n.to_string(),
        }
    }
}

fn pipeline(
    tokens: &[Token],
    pos: &mut usize,
    meta: &UsernameMetadata,
    now_ms: i64,
) -> Result<String, String> {
    let mut value: Option<Value> = None;
    loop {
        let mut args: Vec<Value> = Vec::new();
        let mut func: Option<String> = None;
        while let Some(token) = tokens.get(*pos) {
            match token {
                Token::Pipe | Token::Close => break,
                Token::Ident(name) if func.is_none() && args.is_empty() => {
                    func = Some(name.clone());
                    *pos += 1;
                }
                Token::Ident(name) => {
                    // A function used as an operand: called without arguments.
                    *pos += 1;
                    args.push(call(name, Vec::new(), now_ms)?);
                }
                Token::Str(s) => {
                    args.push(Value::Str(s.clone()));
                    *pos += 1;
                }
                Token::Num(n) => {
                    args.push(Value::Num(*n));
                    *pos += 1;
                }
                Token::Field(name) => {
                    args.push(Value::Str(match name.as_str() {
                        "DisplayName" => meta.display_name.clone(),
                        "RoleName" => meta.role_name.clone(),
                        other => return Err(format!("unknown field .{other} in template")),
                    }));
                    *pos += 1;
                }
                Token::Open => {
                    *pos += 1;
                    let inner = pipeline(tokens, pos, meta, now_ms)?;
                    if tokens.get(*pos) != Some(&Token::Close) {
                        return Err("unclosed ( in template".to_owned());
                    }
                    *pos += 1;
                    args.push(Value::Str(inner));
                }
            }
        }
        if let Some(previous) = value.take() {
            args.push(previous);
        }
        value = Some(match func {
            Some(name) => call(&name, args, now_ms)?,
            None if args.len() == 1 => args.remove(0),
            None => return Err("empty command in template".to_owned()),
        });
        match tokens.get(*pos) {
            Some(Token::Pipe) => *pos += 1,
            _ => break,
        }
    }
    Ok(value.map(|v| v.text()).unwrap_or_default())
}

fn int_arg(args: &[Value], index: usize, func: &str) -> Result<usize, String> {
    match args.get(index) {
        Some(Value::Num(n)) if *n >= 0 => Ok(usize::try_from(*n).unwrap_or(0)),
        Some(Value::Str(s)) => s
            .parse()
            .map_err(|_| format!("{func}: {s:?} is not a number")),
        _ => Err(format!("{func}: wrong arguments")),
    }
}

fn str_arg(args: &[Value], index: usize, func: &str) -> Result<String, String> {
    args.get(index)
        .map(Value::text)
        .ok_or_else(|| format!("{func}: wrong number of arguments"))
}

fn call(name: &str, args: Vec<Value>, now_ms: i64) -> Result<Value, String> {
    let want = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("{name}: wants {n} arguments, got {}", args.len()))
        }
    };
    Ok(Value::Str(match name {
        "printf" => {
            let format = str_arg(&args, 0, name)?;
            printf(&format, &args[1..])
        }
        "truncate" => {
            want(2)?;
            let n = int_arg(&args, 0, name)?;
            str_arg(&args, 1, name)?.chars().take(n).collect()
        }
        "truncate_sha256" => {
            want(2)?;
            let n = int_arg(&args, 0, name)?;
            let s = str_arg(&args, 1, name)?;
            if s.chars().count() <= n {
                s
            } else {
                let keep: String = s.chars().take(n.saturating_sub(8)).collect();
                let rest: String = s.chars().skip(n.saturating_sub(8)).collect();
                format!(
                    "{keep}{}",
                    &hex(digest::digest(&digest::SHA256, rest.as_bytes()).as_ref())[..8]
                )
            }
        }
        "uppercase" => {
            want(1)?;
            str_arg(&args, 0, name)?.to_uppercase()
        }
        "lowercase" => {
            want(1)?;
            str_arg(&args, 0, name)?.to_lowercase()
        }
        "replace" => {
            want(3)?;
            let s = str_arg(&args, 2, name)?;
            s.replace(&str_arg(&args, 0, name)?, &str_arg(&args, 1, name)?)
        }
        "sha256" => {
            want(1)?;
            hex(digest::digest(&digest::SHA256, str_arg(&args, 0, name)?.as_bytes()).as_ref())
        }
        "base64" => {
            want(1)?;
            base64::engine::general_purpose::STANDARD.encode(str_arg(&args, 0, name)?)
        }
        "random" => {
            want(1)?;
            random_alphanumeric(int_arg(&args, 0, name)?)
        }
        "unix_time" => {
            want(0)?;
            return Ok(Value::Num(now_ms.div_euclid(1000)));
        }
        "unix_time_millis" => {
            want(0)?;
            return Ok(Value::Num(now_ms));
        }
        "uuid" => {
            want(0)?;
            let mut bytes = [0u8; 16];
            rand::rng().fill(&mut bytes);
            bytes[6] = (bytes[6] & 0x0f) | 0x40;
            bytes[8] = (bytes[8] & 0x3f) | 0x80;
            let h = hex(&bytes);
            format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            )
        }
        other => return Err(format!("function {other:?} not defined")),
    }))
}

fn printf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('s' | 'd' | 'v') => match args.next() {
                Some(value) => out.push_str(&value.text()),
                None => out.push_str("%!s(MISSING)"),
            },
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `n` characters from `A-Z a-z 0-9`.
pub(crate) fn random_alphanumeric(n: usize) -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> UsernameMetadata {
        UsernameMetadata {
            display_name: "token-display".to_owned(),
            role_name: "readonly-role".to_owned(),
        }
    }

    #[test]
    fn the_postgresql_default_truncates_each_part_and_the_whole() {
        let name = render(
            r#"{{ printf "v-%s-%s-%s-%s" (.DisplayName | truncate 8) (.RoleName | truncate 8) (random 20) (unix_time) | truncate 63 }}"#,
            &meta(),
            1_700_000_000_123,
        )
        .unwrap();
        assert!(name.starts_with("v-token-di-readonly-"), "{name}");
        assert!(name.ends_with("-1700000000"), "{name}");
        assert_eq!(name.len(), 2 + 9 + 9 + 21 + 10);
        assert!(
            name[20..40].chars().all(|c| c.is_ascii_alphanumeric()),
            "{name}"
        );
    }

    #[test]
    fn functions_compose_in_pipelines() {
        let name = render(
            r#"x_{{ .RoleName | replace "-" "_" | uppercase }}_{{ unix_time_millis }}"#,
            &meta(),
            42,
        )
        .unwrap();
        assert_eq!(name, "x_READONLY_ROLE_42");
        assert!(render("{{ nope }}", &meta(), 0).is_err());
        assert!(render("{{ .Other }}", &meta(), 0).is_err());
        assert!(render("{{ printf \"%s\"", &meta(), 0).is_err());
    }
}
