//! The template language's parser: the subset of Go's `text/template` that consul-template
//! templates use, read into a small tree ([`Node`]) that `eval.rs` walks.
//!
//! Supported: text and `{{ }}` actions with custom delimiters; `{{-`/`-}}` trimming;
//! `{{/* comments */}}`; pipelines (`a | b "x"`) of commands whose operands are `.`, field
//! chains (`.Data.data.key`, `$v.Field`, `(pipeline).Field`), `$` variables, string (`"…"` with
//! Go escapes, `` `raw` ``), number, `true`/`false`/`nil` literals and function names;
//! `$x := pipeline`, `$x = pipeline`; `if`/`else if`/`else`, `with`/`else with`/`else`,
//! `range` (with `$v :=` or `$k, $v :=`, and `else`), all closed by `end`.
//! Not supported (a parse error naming it): `define`, `template`, `block`, `break`,
//! `continue`, character constants and complex numbers.
//!
//! Invariant: parsing never panics; every error names the template and line as Go does
//! (`template: <name>:<line>: <message>`).

use serde_json::Value;

/// One parsed piece of a template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Text(String),
    /// `{{ pipeline }}`: its value is printed unless it declares or assigns a variable.
    Action(Pipeline),
    If {
        cond: Pipeline,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
    With {
        value: Pipeline,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
    Range {
        value: Pipeline,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

/// `$a, $b := cmd | cmd` (declarations optional).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pipeline {
    pub(crate) line: usize,
    /// Variables declared (`:=`) or assigned (`=`), without the `$`.
    pub(crate) vars: Vec<String>,
    pub(crate) assign: bool,
    pub(crate) commands: Vec<Command>,
}

/// One command of a pipeline: a function with arguments, or a single operand.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Command {
    pub(crate) args: Vec<Operand>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operand {
    /// `.` followed by fields (`.A.B`; empty for `.` itself).
    Dot(Vec<String>),
    /// `$name` followed by fields (`$` alone is the root).
    Var(String, Vec<String>),
    /// A function name.
    Func(String),
    /// A literal (string, number, bool or nil).
    Literal(Value),
    /// `(pipeline)` followed by fields.
    Sub(Box<Pipeline>, Vec<String>),
}

/// Delimiters (default `{{` and `}}`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delims<'a> {
    pub(crate) left: &'a str,
    pub(crate) right: &'a str,
}

impl Default for Delims<'_> {
    fn default() -> Self {
        Delims {
            left: "{{",
            right: "}}",
        }
    }
}

/// Parses `text` (named `name` in errors).
pub(crate) fn parse(name: &str, text: &str, delims: Delims<'_>) -> Result<Vec<Node>, String> {
    let items = lex(text, delims).map_err(|(line, message)| format_error(name, line, &message))?;
    let mut parser = Parser {
        items,
        pos: 0,
        name,
    };
    let (nodes, end) = parser.list()?;
    match end {
        None => Ok(nodes),
        Some((keyword, line)) => Err(format_error(
            name,
            line,
            &format!("unexpected {{{{{keyword}}}}}"),
        )),
    }
}

fn format_error(name: &str, line: usize, message: &str) -> String {
    format!("template: {name}:{line}: {message}")
}

// ---------------------------------------------------------------------------------------------
// Lexing: text and actions, then the tokens of each action.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Dot(Vec<String>),
    Var(String, Vec<String>),
    Ident(String),
    Literal(Value),
    /// `.Field` chain after a `)`.
    Fields(Vec<String>),
    Pipe,
    Open,
    Close,
    Declare,
    Assign,
    Comma,
}

#[derive(Debug)]
enum Item {
    Text(String),
    Action { line: usize, tokens: Vec<Tok> },
}

type LexError = (usize, String);

fn lex(text: &str, delims: Delims<'_>) -> Result<Vec<Item>, LexError> {
    let left = if delims.left.is_empty() {
        "{{"
    } else {
        delims.left
    };
    let right = if delims.right.is_empty() {
        "}}"
    } else {
        delims.right
    };
    let mut items = Vec::new();
    let mut rest = text;
    let mut line = 1;
    let mut trim_next = false;
    while !rest.is_empty() {
        let Some(start) = rest.find(left) else {
            push_text(&mut items, rest, trim_next, false);
            break;
        };
        let after_left = &rest[start + left.len()..];
        let trim_before = after_left.starts_with("- ")
            || after_left.starts_with("-\t")
            || after_left.starts_with("-\n")
            || after_left.starts_with("-\r");
        push_text(&mut items, &rest[..start], trim_next, trim_before);
        line += rest[..start].matches('\n').count();
        let body_start = if trim_before { 1 } else { 0 };
        let inner = &after_left[body_start..];
        let (body, consumed, trim_after) =
            action_body(inner, right).ok_or_else(|| (line, "unclosed action".to_owned()))?;
        let action_line = line;
        line += inner[..consumed].matches('\n').count();
        rest = &inner[consumed..];
        trim_next = trim_after;
        let trimmed = body.trim();
        if trimmed.starts_with("/*") {
            if !trimmed.ends_with("*/") {
                return Err((
                    action_line,
                    "comment ends before closing delimiter".to_owned(),
                ));
            }
            continue;
        }
        let tokens = tokenize(body).map_err(|message| (action_line, message))?;
        if tokens.is_empty() {
            return Err((action_line, "missing value for command".to_owned()));
        }
        items.push(Item::Action {
            line: action_line,
            tokens,
        });
    }
    Ok(items)
}

/// Finds the end of an action, outside string literals: (body, bytes consumed including the
/// right delimiter, whether it ends with ` -}}`).
fn action_body<'a>(inner: &'a str, right: &str) -> Option<(&'a str, usize, bool)> {
    let bytes = inner.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'"' => {
                index += 1;
                while index < bytes.len() && bytes[index] != b'"' {
                    if bytes[index] == b'\\' {
                        index += 1;
                    }
                    index += 1;
                }
                index += 1;
            }
            b'`' => {
                index += 1;
                while index < bytes.len() && bytes[index] != b'`' {
                    index += 1;
                }
                index += 1;
            }
            _ => {
                let here = &inner[index..];
                if here.starts_with(right) {
                    let body = &inner[..index];
                    if let Some(stripped) = body.strip_suffix('-')
                        && stripped.ends_with([' ', '\t', '\n', '\r'])
                    {
                        return Some((stripped, index + right.len(), true));
                    }
                    return Some((body, index + right.len(), false));
                }
                if let Some(c) = here.chars().next() {
                    index += c.len_utf8();
                } else {
                    break;
                }
            }
        }
    }
    None
}

fn push_text(items: &mut Vec<Item>, text: &str, trim_start: bool, trim_end: bool) {
    let mut text = text;
    if trim_start {
        text = text.trim_start_matches([' ', '\t', '\n', '\r']);
    }
    if trim_end {
        text = text.trim_end_matches([' ', '\t', '\n', '\r']);
    }
    if !text.is_empty() {
        items.push(Item::Text(text.to_owned()));
    }
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

fn tokenize(body: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = body.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '|' => {
                tokens.push(Tok::Pipe);
                i += 1;
            }
            '(' => {
                tokens.push(Tok::Open);
                i += 1;
            }
            ')' => {
                tokens.push(Tok::Close);
                i += 1;
                if chars.get(i) == Some(&'.') {
                    let (fields, next) = fields_at(&chars, i)?;
                    tokens.push(Tok::Fields(fields));
                    i = next;
                }
            }
            ',' => {
                tokens.push(Tok::Comma);
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Tok::Declare);
                i += 2;
            }
            '=' => {
                tokens.push(Tok::Assign);
                i += 1;
            }
            '"' => {
                let (value, next) = quoted(&chars, i)?;
                tokens.push(Tok::Literal(Value::String(value)));
                i = next;
            }
            '`' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '`')
                    .ok_or_else(|| "unterminated raw quoted string".to_owned())?;
                let value: String = chars[i + 1..i + 1 + end].iter().collect();
                tokens.push(Tok::Literal(Value::String(value)));
                i += end + 2;
            }
            '\'' => return Err("character constants are not supported".to_owned()),
            '.' if chars.get(i + 1).is_none_or(|c| !c.is_ascii_digit()) => {
                if chars.get(i + 1).is_some_and(|&c| is_ident_char(c)) {
                    let (fields, next) = fields_at(&chars, i)?;
                    tokens.push(Tok::Dot(fields));
                    i = next;
                } else {
                    tokens.push(Tok::Dot(Vec::new()));
                    i += 1;
                }
            }
            '$' => {
                let mut end = i + 1;
                while end < chars.len() && is_ident_char(chars[end]) {
                    end += 1;
                }
                let name: String = chars[i + 1..end].iter().collect();
                let mut fields = Vec::new();
                i = end;
                if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(|&c| is_ident_char(c))
                {
                    let (more, next) = fields_at(&chars, i)?;
                    fields = more;
                    i = next;
                }
                tokens.push(Tok::Var(name, fields));
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '+' || c == '.')
                    && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                let mut end = i + 1;
                while end < chars.len()
                    && (chars[end].is_ascii_alphanumeric()
                        || matches!(chars[end], '.' | '_' | '+' | '-'))
                {
                    // A sign only after an exponent marker.
                    if matches!(chars[end], '+' | '-') && !matches!(chars[end - 1], 'e' | 'E') {
                        break;
                    }
                    end += 1;
                }
                let text: String = chars[i..end].iter().collect();
                tokens.push(Tok::Literal(number(&text)?));
                i = end;
            }
            c if is_ident_char(c) => {
                let mut end = i;
                while end < chars.len() && is_ident_char(chars[end]) {
                    end += 1;
                }
                let word: String = chars[i..end].iter().collect();
                i = end;
                tokens.push(match word.as_str() {
                    "true" => Tok::Literal(Value::Bool(true)),
                    "false" => Tok::Literal(Value::Bool(false)),
                    "nil" => Tok::Literal(Value::Null),
                    _ => Tok::Ident(word),
                });
            }
            other => return Err(format!("unexpected {other:?} in command")),
        }
    }
    Ok(tokens)
}

/// `.A.B.C` starting at `chars[start] == '.'`: the names and the index after them.
fn fields_at(chars: &[char], start: usize) -> Result<(Vec<String>, usize), String> {
    let mut fields = Vec::new();
    let mut i = start;
    while chars.get(i) == Some(&'.') {
        let mut end = i + 1;
        while end < chars.len() && is_ident_char(chars[end]) {
            end += 1;
        }
        if end == i + 1 {
            return Err("unexpected . after term".to_owned());
        }
        fields.push(chars[i + 1..end].iter().collect());
        i = end;
    }
    Ok((fields, i))
}

fn quoted(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut i = start + 1;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err("unterminated quoted string".to_owned());
        };
        match c {
            '"' => return Ok((out, i + 1)),
            '\n' => return Err("unterminated quoted string".to_owned()),
            '\\' => {
                let Some(&escaped) = chars.get(i + 1) else {
                    return Err("unterminated quoted string".to_owned());
                };
                i += 2;
                match escaped {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '\\' => out.push('\\'),
                    '"' => out.push('"'),
                    '\'' => out.push('\''),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    'x' | 'u' | 'U' => {
                        let len = match escaped {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String =
                            chars.get(i..i + len).unwrap_or_default().iter().collect();
                        let code = u32::from_str_radix(&hex, 16)
                            .ok()
                            .filter(|_| hex.len() == len)
                            .and_then(char::from_u32)
                            .ok_or_else(|| {
                                format!("invalid syntax in string escape \\{escaped}{hex}")
                            })?;
                        out.push(code);
                        i += len;
                    }
                    other => return Err(format!("invalid syntax: unknown escape \\{other}")),
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
}

fn number(text: &str) -> Result<Value, String> {
    let cleaned = text.replace('_', "");
    let (negative, digits) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.strip_prefix('+').unwrap_or(&cleaned)),
    };
    let radix = if digits.starts_with("0x") || digits.starts_with("0X") {
        Some((16, &digits[2..]))
    } else if digits.starts_with("0o") || digits.starts_with("0O") {
        Some((8, &digits[2..]))
    } else if digits.starts_with("0b") || digits.starts_with("0B") {
        Some((2, &digits[2..]))
    } else {
        None
    };
    if let Some((radix, body)) = radix
        && let Ok(value) = i64::from_str_radix(body, radix)
    {
        return Ok(Value::from(if negative { -value } else { value }));
    }
    if let Ok(value) = cleaned.parse::<i64>() {
        return Ok(Value::from(value));
    }
    if let Ok(value) = cleaned.parse::<u64>() {
        return Ok(Value::from(value));
    }
    cleaned
        .parse::<f64>()
        .ok()
        .filter(|value| value.is_finite())
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| format!("bad number syntax: {text:?}"))
}

// ---------------------------------------------------------------------------------------------
// Parsing the items into nodes.

struct Parser<'a> {
    items: Vec<Item>,
    pos: usize,
    name: &'a str,
}

/// The keyword that ended a list (`end` or `else`, with the rest of the `else` action) and
/// its line.
type Terminator = Option<(String, usize)>;

impl Parser<'_> {
    fn error(&self, line: usize, message: &str) -> String {
        format_error(self.name, line, message)
    }

    /// Nodes until `{{end}}`, `{{else …}}` or the end of input.
    fn list(&mut self) -> Result<(Vec<Node>, Terminator), String> {
        let mut nodes = Vec::new();
        while self.pos < self.items.len() {
            let index = self.pos;
            self.pos += 1;
            let (line, tokens) = match &self.items[index] {
                Item::Text(text) => {
                    nodes.push(Node::Text(text.clone()));
                    continue;
                }
                Item::Action { line, tokens } => (*line, tokens.clone()),
            };
            let keyword = match tokens.first() {
                Some(Tok::Ident(word)) => word.as_str(),
                _ => "",
            };
            match keyword {
                "end" => {
                    if tokens.len() > 1 {
                        return Err(self.error(line, "unexpected token in end"));
                    }
                    return Ok((nodes, Some(("end".to_owned(), line))));
                }
                "else" => {
                    // Leave the rest of the action for the caller (`else if …`).
                    self.pos -= 1;
                    return Ok((nodes, Some(("else".to_owned(), line))));
                }
                "if" | "with" | "range" => {
                    let keyword = keyword.to_owned();
                    nodes.push(self.control(&keyword, line, &tokens[1..])?);
                }
                "define" | "template" | "block" | "break" | "continue" => {
                    return Err(self.error(
                        line,
                        &format!("{{{{{keyword}}}}} is not supported by cairn's template renderer"),
                    ));
                }
                _ => nodes.push(Node::Action(self.pipeline(line, &tokens, false)?)),
            }
        }
        Ok((nodes, None))
    }

    /// An `if`, `with` or `range` whose header tokens follow the keyword.
    fn control(&mut self, keyword: &str, line: usize, header: &[Tok]) -> Result<Node, String> {
        let value = self.pipeline(line, header, keyword == "range")?;
        if value.commands.is_empty() {
            return Err(self.error(line, &format!("missing value for {keyword}")));
        }
        let (then, end) = self.list()?;
        let otherwise = match end {
            None => return Err(self.error(line, &format!("unexpected EOF in {keyword}"))),
            Some((word, _)) if word == "end" => Vec::new(),
            Some((_, else_line)) => {
                // The `else` action: `else`, `else if …` or `else with …`.
                let tokens = match &self.items[self.pos] {
                    Item::Action { tokens, .. } => tokens.clone(),
                    Item::Text(_) => Vec::new(),
                };
                self.pos += 1;
                match tokens.get(1) {
                    None => {
                        let (otherwise, end) = self.list()?;
                        match end {
                            Some((word, _)) if word == "end" => otherwise,
                            Some((_, line)) => {
                                return Err(self.error(line, "expected end; found {{else}}"));
                            }
                            None => {
                                return Err(
                                    self.error(else_line, &format!("unexpected EOF in {keyword}"))
                                );
                            }
                        }
                    }
                    Some(Tok::Ident(chained))
                        if (chained == "if" || chained == "with") && keyword != "range" =>
                    {
                        // `else if` chains share the outer `end`.
                        let chained = chained.clone();
                        vec![self.control(&chained, else_line, &tokens[2..])?]
                    }
                    Some(_) => return Err(self.error(else_line, "unexpected token in else")),
                }
            }
        };
        Ok(match keyword {
            "if" => Node::If {
                cond: value,
                then,
                otherwise,
            },
            "with" => Node::With {
                value,
                then,
                otherwise,
            },
            _ => Node::Range {
                value,
                body: then,
                otherwise,
            },
        })
    }

    /// A pipeline, with its optional declaration (`range` allows two variables).
    fn pipeline(&self, line: usize, tokens: &[Tok], range: bool) -> Result<Pipeline, String> {
        let mut vars = Vec::new();
        let mut assign = false;
        let mut rest = tokens;
        // `$a :=`, `$a =`, or (range) `$k, $v :=`.
        let declared = match tokens {
            [Tok::Var(name, fields), Tok::Declare | Tok::Assign, ..] if fields.is_empty() => {
                vars.push(name.clone());
                assign = matches!(tokens[1], Tok::Assign);
                2
            }
            [
                Tok::Var(key, kf),
                Tok::Comma,
                Tok::Var(value, vf),
                Tok::Declare | Tok::Assign,
                ..,
            ] if range && kf.is_empty() && vf.is_empty() => {
                vars.push(key.clone());
                vars.push(value.clone());
                assign = matches!(tokens[3], Tok::Assign);
                4
            }
            _ => 0,
        };
        rest = &rest[declared..];
        let mut commands = Vec::new();
        let mut pos = 0;
        while pos < rest.len() {
            let (command, next) = self.command(line, rest, pos)?;
            commands.push(command);
            pos = next;
            match rest.get(pos) {
                None => {}
                Some(Tok::Pipe) => {
                    pos += 1;
                    if pos >= rest.len() {
                        return Err(self.error(line, "missing command after |"));
                    }
                }
                Some(other) => {
                    return Err(self.error(line, &format!("unexpected {other:?} in operand")));
                }
            }
        }
        if declared > 0 && commands.is_empty() {
            return Err(self.error(line, "missing value for command"));
        }
        Ok(Pipeline {
            line,
            vars,
            assign,
            commands,
        })
    }

    /// One command starting at `tokens[pos]`, up to a `|`, `)` or the end.
    fn command(
        &self,
        line: usize,
        tokens: &[Tok],
        mut pos: usize,
    ) -> Result<(Command, usize), String> {
        let mut args = Vec::new();
        while let Some(token) = tokens.get(pos) {
            let operand = match token {
                Tok::Pipe | Tok::Close => break,
                Tok::Dot(fields) => Operand::Dot(fields.clone()),
                Tok::Var(name, fields) => Operand::Var(name.clone(), fields.clone()),
                Tok::Ident(name) => Operand::Func(name.clone()),
                Tok::Literal(value) => Operand::Literal(value.clone()),
                Tok::Open => {
                    let close = matching_close(tokens, pos)
                        .ok_or_else(|| self.error(line, "unclosed left paren"))?;
                    let inner = self.pipeline(line, &tokens[pos + 1..close], false)?;
                    if inner.commands.is_empty() {
                        return Err(self.error(line, "missing value for parenthesized pipeline"));
                    }
                    pos = close;
                    let fields = match tokens.get(close + 1) {
                        Some(Tok::Fields(fields)) => {
                            pos += 1;
                            fields.clone()
                        }
                        _ => Vec::new(),
                    };
                    Operand::Sub(Box::new(inner), fields)
                }
                Tok::Fields(_) | Tok::Declare | Tok::Assign | Tok::Comma => {
                    return Err(self.error(line, &format!("unexpected {token:?} in command")));
                }
            };
            args.push(operand);
            pos += 1;
        }
        if args.is_empty() {
            return Err(self.error(line, "missing value for command"));
        }
        Ok((Command { args }, pos))
    }
}

fn matching_close(tokens: &[Tok], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (index, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth -= 1;
                if depth == 0 {
                    return Some(index);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> Vec<Node> {
        parse("t", text, Delims::default()).unwrap()
    }

    #[test]
    fn text_and_trimmed_actions_split_as_go_does() {
        let nodes = parse_ok("a  {{- .X -}}  b{{/* note */}}c");
        assert_eq!(
            nodes,
            vec![
                Node::Text("a".to_owned()),
                Node::Action(Pipeline {
                    line: 1,
                    vars: vec![],
                    assign: false,
                    commands: vec![Command {
                        args: vec![Operand::Dot(vec!["X".to_owned()])]
                    }],
                }),
                Node::Text("b".to_owned()),
                Node::Text("c".to_owned()),
            ]
        );
    }

    #[test]
    fn else_if_chains_share_one_end() {
        let nodes = parse_ok("{{ if .A }}a{{ else if .B }}b{{ else }}c{{ end }}");
        let Node::If { otherwise, .. } = &nodes[0] else {
            panic!("{nodes:?}")
        };
        let Node::If {
            otherwise: last, ..
        } = &otherwise[0]
        else {
            panic!("{otherwise:?}")
        };
        assert_eq!(last, &vec![Node::Text("c".to_owned())]);
    }

    #[test]
    fn range_declarations_and_parenthesized_fields_parse() {
        let nodes = parse_ok(r#"{{ range $k, $v := (secret "a/b").Data }}{{ $k }}{{ end }}"#);
        let Node::Range { value, .. } = &nodes[0] else {
            panic!()
        };
        assert_eq!(value.vars, vec!["k", "v"]);
        assert!(
            matches!(&value.commands[0].args[0], Operand::Sub(_, fields) if fields == &["Data"])
        );
    }

    #[test]
    fn custom_delimiters_leave_the_default_ones_as_text() {
        let nodes = parse(
            "t",
            "[[ .A ]] {{ .B }}",
            Delims {
                left: "[[",
                right: "]]",
            },
        )
        .unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1], Node::Text(" {{ .B }}".to_owned()));
    }

    #[test]
    fn errors_name_the_line_and_the_unsupported_syntax() {
        let error = parse("t", "a\n{{ if .A }}", Delims::default()).unwrap_err();
        assert_eq!(error, "template: t:2: unexpected EOF in if");
        let error = parse("t", "{{ define \"x\" }}{{ end }}", Delims::default()).unwrap_err();
        assert!(error.contains("{{define}} is not supported"), "{error}");
        let error = parse("t", "{{ .A ", Delims::default()).unwrap_err();
        assert_eq!(error, "template: t:1: unclosed action");
        let error = parse("t", "{{ end }}", Delims::default()).unwrap_err();
        assert_eq!(error, "template: t:1: unexpected {{end}}");
        let error = parse("t", "{{ \"abc }}", Delims::default()).unwrap_err();
        assert!(error.starts_with("template: t:1:"), "{error}");
        assert!(parse("t", "{{ 'a' }}", Delims::default()).is_err());
        assert!(parse("t", "{{ }}", Delims::default()).is_err());
        assert!(parse("t", "{{ .A | }}", Delims::default()).is_err());
    }

    #[test]
    fn literals_are_read_as_go_reads_them() {
        let nodes = parse_ok(r#"{{ print "a\tb\u00e9" `raw\n` 12 -3 1.5 0x1f true nil }}"#);
        let Node::Action(pipeline) = &nodes[0] else {
            panic!()
        };
        let args = &pipeline.commands[0].args;
        assert_eq!(args[1], Operand::Literal(Value::from("a\tbé")));
        assert_eq!(args[2], Operand::Literal(Value::from("raw\\n")));
        assert_eq!(args[3], Operand::Literal(Value::from(12)));
        assert_eq!(args[4], Operand::Literal(Value::from(-3)));
        assert_eq!(args[5], Operand::Literal(Value::from(1.5)));
        assert_eq!(args[6], Operand::Literal(Value::from(31)));
        assert_eq!(args[7], Operand::Literal(Value::Bool(true)));
        assert_eq!(args[8], Operand::Literal(Value::Null));
    }
}
