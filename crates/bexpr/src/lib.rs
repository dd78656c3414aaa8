//! go-bexpr boolean filter expressions (the `?filter=` query parameter of Nomad's and Consul's
//! APIs), evaluated over the JSON form of an object (a job, an allocation, a node, a catalog
//! entry...).
//!
//! Where it sits: a pure library below the `scheduler` and `registry` services, which knows
//! nothing of HTTP. Their list handlers parse the query parameter once with [`Filter::parse`]
//! and evaluate it per item; each service words the errors its upstream's way (the
//! scheduler: 400 `failed to read filter expression: <msg>` for a parse error and `failed to
//! read result page: error finding value in datum: <msg>` for an evaluation error; the
//! registry: Consul's `Failed to create boolean expression evaluator: <msg>`). The scheduler
//! calls [`Filter::matches`]; the registry calls [`Filter::matches_in`] with
//! [`Layout::any_element`], Consul's reading of a selector through an array.
//!
//! Files: `parse.rs` (the grammar, a mirror of go-bexpr's PEG, with its error texts),
//! `eval.rs` (semantics over `serde_json::Value`), `goconv.rs` (Go `strconv` look-alikes).
//!
//! Invariants:
//! - [`Filter`] holds everything precomputed (coerced values, compiled regexes); evaluation
//!   borrows the datum and does not allocate unless it fails.
//! - Neither parsing nor evaluation panics, whatever the input; nesting is bounded.
//!
//! Language summary (see go-bexpr's `grammar/grammar.peg` and `evaluate.go`):
//! `or` < `and` < `not` in precedence, parentheses; matches are `Sel == V`, `Sel != V`,
//! `Sel contains V`, `Sel not contains V`, `V in Sel`, `V not in Sel`, `Sel matches V`,
//! `Sel not matches V`, `Sel is empty`, `Sel is not empty`. Selectors are `a.b`, `a["k"]`,
//! `a.0` or a quoted JSON pointer `"/a/b"`; values are bare words, numbers, `"strings"` or
//! `` `raw strings` ``.
//!
//! Where JSON forces a choice that Go's types made for go-bexpr:
//! - Objects are maps for `in`/`contains` (key present) and `is empty`; `map_fields` decides
//!   only whether a missing key is "not present" or an unknown struct field.
//! - `null` is an empty map (when `map_fields` says so), an empty collection for `in` and
//!   `is empty`, `""` for `matches`, and equals any zero value (`""`, `0`, `false`) for `==`.
//! - Arrays compare element by element like a Go `[]interface{}`: an element the value cannot
//!   be coerced to does not match (a typed Go slice would report an error instead).
//! - A selector step into an array needs an index (`a.0`), unless [`Layout::any_element`]
//!   says the datum is Consul's: then it applies to every element (any one matching).

mod eval;
mod goconv;
mod parse;

/// A compiled filter expression.
#[derive(Debug, Clone)]
pub struct Filter {
    root: parse::Node,
}

/// Why a filter could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilterError {
    /// The expression is malformed (go-bexpr's parser text, e.g.
    /// `1:12 (11): rule "string": Unterminated string literal`).
    #[error("{0}")]
    Parse(String),
    /// The expression does not fit the datum (e.g. an unknown struct field).
    #[error("{0}")]
    Eval(String),
}

impl Filter {
    /// Parses a bexpr expression. Error text is what the 400 body says after Nomad's prefix.
    ///
    /// # Errors
    /// [`FilterError::Parse`] with go-bexpr's parser message when `src` is not a valid
    /// expression (an empty `src` included) or a `matches` pattern does not compile.
    pub fn parse(src: &str) -> Result<Filter, FilterError> {
        parse::parse(src)
            .map(|root| Filter { root })
            .map_err(FilterError::Parse)
    }

    /// Evaluates against a datum (the full JSON object of a job or allocation as the API
    /// renders it). `map_fields` lists the selector paths whose JSON objects are Go *maps*
    /// (not structs), written dotted with `*` for any one segment, e.g.
    /// `["Meta", "TaskStates", "Job.Meta", "Job.TaskGroups.*.Meta"]`.
    ///
    /// # Errors
    /// [`FilterError::Eval`] when a selector does not resolve (unknown struct field, index out
    /// of range, a path through a scalar) or the operator does not fit the value found (a
    /// value text that cannot be coerced to the field's kind, `==` on a collection, …).
    pub fn matches(
        &self,
        datum: &serde_json::Value,
        map_fields: &[&str],
    ) -> Result<bool, FilterError> {
        self.matches_in(
            datum,
            &Layout {
                map_fields,
                any_element: false,
            },
        )
    }

    /// Evaluates against a datum laid out as `layout` says (see [`Layout`]); [`Filter::matches`]
    /// is this with `any_element` off.
    ///
    /// # Errors
    /// As [`Filter::matches`]; with `any_element`, an element's error ends the walk.
    pub fn matches_in(
        &self,
        datum: &serde_json::Value,
        layout: &Layout<'_>,
    ) -> Result<bool, FilterError> {
        eval::eval(&self.root, datum, layout)
    }
}

/// How a datum's JSON stands for the Go value go-bexpr would walk by reflection.
#[derive(Debug, Clone, Copy, Default)]
pub struct Layout<'a> {
    /// The selector paths whose JSON objects are Go *maps* (not structs), dotted, `*` for any
    /// one segment: a missing last key there is "not present" rather than an error.
    pub map_fields: &'a [&'a str],
    /// Consul's go-bexpr (v0.1.2) cannot index arrays: a selector step into an array of
    /// structs applies to every element, and the match holds when it holds for any of them
    /// (`Checks.Status == "critical"`: some check is critical; `Checks.Status != "passing"`:
    /// some check is not passing; an empty array matches nothing). With this on, a step that
    /// is not an integer does that; an integer step still indexes. Nomad's go-bexpr (off)
    /// reports a non-integer step into an array as an error.
    pub any_element: bool,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const ALLOC_MAPS: &[&str] = &["Meta", "TaskStates", "Job.Meta", "Job.TaskGroups.*.Meta"];

    fn alloc() -> Value {
        json!({
            "ID": "8c5f0c4a-1111-2222-3333-444455556666",
            "JobID": "web-frontend",
            "TaskGroup": "app",
            "NodeID": "node-1",
            "NodeName": "",
            "ClientStatus": "running",
            "DesiredStatus": "run",
            "CreateIndex": 17,
            "ModifyIndex": 18446744073709551615u64,
            "Score": 0.5,
            "Canary": false,
            "Offset": -3,
            "Datacenters": ["dc1", "dc2"],
            "Ports": [8080, 8443],
            "Flags": [true],
            "Empty": [],
            "Meta": {"team": "infra", "tier": ""},
            "NilMeta": null,
            "Note": null,
            "TaskStates": {
                "redis": {"State": "dead", "Failed": false, "Restarts": 2, "Events": []},
                "web": {"State": "running", "Failed": false, "Restarts": 0, "Events": [
                    {"Type": "Started"}
                ]}
            },
            "Job": {
                "ID": "web-frontend",
                "Meta": {},
                "TaskGroups": [
                    {"Name": "app", "Count": 3, "Meta": {"owner": "ops"}}
                ]
            }
        })
    }

    fn eval_with(src: &str, maps: &[&str]) -> Result<bool, FilterError> {
        let filter = Filter::parse(src).unwrap_or_else(|e| panic!("{src:?}: {e}"));
        filter.matches(&alloc(), maps)
    }

    fn check(src: &str) -> bool {
        eval_with(src, ALLOC_MAPS).unwrap_or_else(|e| panic!("{src:?}: {e}"))
    }

    fn eval_error(src: &str) -> String {
        match eval_with(src, ALLOC_MAPS) {
            Err(FilterError::Eval(msg)) => msg,
            other => panic!("{src:?}: {other:?}"),
        }
    }

    fn parse_error(src: &str) -> String {
        match Filter::parse(src) {
            Err(FilterError::Parse(msg)) => msg,
            other => panic!("{src:?}: {other:?}"),
        }
    }

    #[test]
    fn reference_examples_evaluate() {
        assert!(check(r#"ClientStatus == "running""#));
        assert!(check(r#"JobID matches "^web-.*" and TaskGroup != "cache""#));
        assert!(!check(r#"JobID matches "^web-.*" and TaskGroup != "app""#));
        assert!(check(r#""dc2" in Datacenters"#));
        assert!(check(r#"Datacenters contains "dc2""#));
        assert!(!check(r#""dc3" in Datacenters"#));
        assert!(check(r#"TaskStates.redis.State == "dead""#));
        assert!(check(r#"Meta["team"] == "infra""#));
        assert!(check("NodeID is not empty"));
        assert!(check(r#"not (DesiredStatus == "stop")"#));
        assert!(!check(r#"not (DesiredStatus == "run")"#));
    }

    #[test]
    fn equality_on_strings_is_exact() {
        assert!(check("ClientStatus == running"));
        assert!(!check(r#"ClientStatus == "Running""#));
        assert!(check(r#"ClientStatus != "pending""#));
        assert!(check(r#"NodeName == """#));
        assert!(check(r"JobID == `web-frontend`"));
    }

    #[test]
    fn equality_coerces_to_the_field_kind() {
        assert!(check("CreateIndex == 17"));
        assert!(check(r#"CreateIndex == "17""#));
        assert!(check(r#"CreateIndex == "0x11""#));
        assert!(check("CreateIndex != 18"));
        assert!(check("Offset == -3"));
        assert!(check("ModifyIndex == 18446744073709551615"));
        assert!(check("Score == 0.5"));
        assert!(check(r#"Score == "5e-1""#));
        assert!(check("Canary == false"));
        assert!(check("Canary == F"));
        assert!(check("Canary == 0"));
        assert!(check("Canary != true"));
        assert!(check("TaskStates.redis.Restarts == 2"));
        assert!(check("Job.TaskGroups.0.Count == 3"));
    }

    #[test]
    fn coercion_failure_is_an_eval_error() {
        assert_eq!(
            eval_error("Canary == yes"),
            "error getting match value in expression: strconv.ParseBool: parsing \"yes\": \
             invalid syntax"
        );
        assert_eq!(
            eval_error("CreateIndex == 1.5"),
            "error getting match value in expression: strconv.ParseInt: parsing \"1.5\": \
             invalid syntax"
        );
        assert_eq!(
            eval_error("CreateIndex != abc"),
            "error getting match value in expression: strconv.ParseInt: parsing \"abc\": \
             invalid syntax"
        );
        assert_eq!(
            eval_error("Score == high"),
            "error getting match value in expression: strconv.ParseFloat: parsing \"high\": \
             invalid syntax"
        );
        assert_eq!(
            eval_error("ModifyIndex == -1"),
            "error getting match value in expression: strconv.ParseUint: parsing \"-1\": \
             invalid syntax"
        );
    }

    #[test]
    fn null_compares_as_a_zero_value() {
        assert!(check(r#"Note == """#));
        assert!(check("Note == 0"));
        assert!(check("Note == false"));
        assert!(check(r#"Note != "x""#));
        assert!(check("Note is empty"));
        assert!(!check(r#""x" in Note"#));
        assert!(check(r#"Note matches "^$""#));
    }

    #[test]
    fn equality_needs_a_primitive() {
        assert_eq!(
            eval_error(r#"Datacenters == "dc1""#),
            "unable to find suitable primitive comparison function for matching"
        );
        assert_eq!(
            eval_error(r#"Meta != "x""#),
            "unable to find suitable primitive comparison function for matching"
        );
    }

    #[test]
    fn in_checks_map_keys_array_elements_and_substrings() {
        assert!(check(r#""team" in Meta"#));
        assert!(!check(r#""infra" in Meta"#));
        assert!(check(r#""nope" not in Meta"#));
        assert!(check(r#"Meta contains "tier""#));
        assert!(check(r#""redis" in TaskStates"#));
        assert!(check("8443 in Ports"));
        assert!(check(r#""0x1f90" in Ports"#));
        assert!(!check("80 in Ports"));
        assert!(check("true in Flags"));
        assert!(!check(r#""dc1" in Empty"#));
        assert!(check(r#""front" in JobID"#));
        assert!(check(r#"JobID contains "web""#));
        assert!(check(r#"JobID not contains "api""#));
        assert!(check(r#""" in JobID"#));
    }

    #[test]
    fn in_skips_elements_the_value_cannot_become() {
        assert!(!check(r#""abc" in Ports"#));
        assert!(!check(r#""maybe" in Flags"#));
    }

    #[test]
    fn in_rejects_scalars_and_struct_elements() {
        assert_eq!(
            eval_error("1 in CreateIndex"),
            "cannot perform in/contains operations on type int for selector: \"CreateIndex\""
        );
        assert_eq!(
            eval_error("Canary contains true"),
            "cannot perform in/contains operations on type bool for selector: \"Canary\""
        );
        assert_eq!(
            eval_error(r#""app" in Job.TaskGroups"#),
            "unable to find suitable primitive comparison function for \"in\" comparison"
        );
    }

    #[test]
    fn is_empty_measures_strings_arrays_and_objects() {
        assert!(check("NodeName is empty"));
        assert!(check("NodeID is not empty"));
        assert!(check("Empty is empty"));
        assert!(check("Datacenters is not empty"));
        assert!(check("Job.Meta is empty"));
        assert!(check("Meta is not empty"));
        assert!(check(r#"Meta["tier"] is empty"#));
        assert!(check("NilMeta is empty"));
        assert_eq!(
            eval_error("CreateIndex is empty"),
            "cannot perform is-empty operations on type int for selector: \"CreateIndex\""
        );
    }

    #[test]
    fn matches_uses_precompiled_regex_on_strings() {
        assert!(check(r#"JobID matches "^web-""#));
        assert!(check(r#"JobID matches "front""#));
        assert!(!check(r#"JobID matches "^front""#));
        assert!(check(r#"JobID not matches "^api-""#));
        assert!(check(r#"ID matches "^[0-9a-f]{8}-""#));
        assert_eq!(
            eval_error(r#"CreateIndex matches "1""#),
            "value of type int is not convertible to []byte"
        );
        assert_eq!(
            eval_error(r#"Job matches "x""#),
            "value of type struct is not convertible to []byte"
        );
    }

    #[test]
    fn missing_map_key_is_false_not_an_error() {
        let cases = [
            (r#"Meta["owner"] == "x""#, false),
            (r#"Meta["owner"] != "x""#, true),
            (r#""x" in Meta["owner"]"#, false),
            (r#""x" not in Meta["owner"]"#, true),
            (r#"Meta["owner"] contains "x""#, false),
            (r#"Meta["owner"] not contains "x""#, true),
            (r#"Meta["owner"] is empty"#, true),
            (r#"Meta["owner"] is not empty"#, false),
            (r#"Meta["owner"] matches "x""#, false),
            (r#"Meta["owner"] not matches "x""#, true),
            (r#"Job.Meta.owner == "x""#, false),
            (r#"Job.TaskGroups.0.Meta.team == "x""#, false),
            (r#"Job.TaskGroups.0.Meta.owner == "ops""#, true),
            (r#"NilMeta.team != "x""#, true),
        ];
        let maps: &[&str] = &[
            "Meta",
            "NilMeta",
            "TaskStates",
            "Job.Meta",
            "Job.TaskGroups.*.Meta",
        ];
        for (src, want) in cases {
            assert_eq!(eval_with(src, maps), Ok(want), "{src}");
        }
    }

    #[test]
    fn missing_struct_field_is_an_error() {
        assert_eq!(
            eval_error(r#"Foo == "x""#),
            "/Foo at part 0: couldn't find key: struct field with name \"Foo\""
        );
        assert_eq!(
            eval_error(r#"Job.Bar == "x""#),
            "/Job/Bar at part 1: couldn't find key: struct field with name \"Bar\""
        );
        assert_eq!(
            eval_error(r#"TaskStates.redis.Nope is empty"#),
            "/TaskStates/redis/Nope at part 2: couldn't find key: struct field with name \
             \"Nope\""
        );
    }

    #[test]
    fn map_not_listed_in_map_fields_is_a_struct() {
        assert_eq!(
            eval_with(r#"Meta["owner"] == "x""#, &[]),
            Err(FilterError::Eval(
                "/Meta/owner at part 1: couldn't find key: struct field with name \"owner\""
                    .to_owned()
            ))
        );
    }

    #[test]
    fn missing_key_before_the_last_part_is_an_error_even_in_a_map() {
        // go-bexpr forgives only a missing *last* key whose parent is a map.
        assert_eq!(
            eval_error(r#"TaskStates.api.State == "dead""#),
            "/TaskStates/api/State at part 1: couldn't find key \"api\""
        );
    }

    #[test]
    fn array_index_out_of_range_is_an_error() {
        assert!(check(r#"Datacenters.1 == "dc2""#));
        assert!(check(r#"Datacenters["0"] == "dc1""#));
        assert_eq!(
            eval_error(r#"Datacenters.5 == "dc1""#),
            "/Datacenters/5 at part 1: index 5 is out of range (length = 2)"
        );
        assert_eq!(
            eval_error(r#"Datacenters["x"] == "dc1""#),
            "/Datacenters/x at part 1: couldn't convert value \"x\" to type int"
        );
        assert_eq!(
            eval_error(r#"Datacenters["-1"] == "dc1""#),
            "/Datacenters/-1 at part 1: index -1 is out of range (length = 2)"
        );
    }

    #[test]
    fn descending_into_a_scalar_is_an_error() {
        assert_eq!(
            eval_error(r#"ClientStatus.x == "y""#),
            "/ClientStatus/x: at part 1, invalid value kind: string"
        );
        assert_eq!(
            eval_error(r#"Note.x == "y""#),
            "/Note/x: at part 1, invalid value kind: invalid"
        );
    }

    #[test]
    fn json_pointer_selectors_resolve_like_dotted_ones() {
        assert!(check(r#""/TaskStates/redis/State" == dead"#));
        assert!(check(r#""/Datacenters/0" == dc1"#));
        assert_eq!(
            eval_error(r#""/Nope" == x"#),
            "/Nope at part 0: couldn't find key: struct field with name \"Nope\""
        );
    }

    #[test]
    fn and_binds_tighter_than_or() {
        // false and true or true  ==  (false and true) or true
        assert!(check(
            r#"ClientStatus == "x" and JobID == "web-frontend" or TaskGroup == "app""#
        ));
        // true or true and false  ==  true or (true and false)
        assert!(check(
            r#"ClientStatus == "running" or JobID == "web-frontend" and TaskGroup == "x""#
        ));
        assert!(!check(
            r#"(ClientStatus == "running" or JobID == "web-frontend") and TaskGroup == "x""#
        ));
    }

    #[test]
    fn not_binds_tighter_than_and() {
        assert!(check(r#"not ClientStatus == "x" and TaskGroup == "app""#));
        assert!(!check(
            r#"not (ClientStatus == "running" and TaskGroup == "app")"#
        ));
        assert!(check(r#"not not ClientStatus == "running""#));
    }

    #[test]
    fn and_or_short_circuit_past_errors() {
        assert!(!check(r#"ClientStatus == "x" and Missing == "y""#));
        assert!(check(r#"ClientStatus == "running" or Missing == "y""#));
        assert!(
            eval_with(
                r#"ClientStatus == "running" and Missing == "y""#,
                ALLOC_MAPS
            )
            .is_err()
        );
        assert!(eval_with(r#"ClientStatus == "x" or Missing == "y""#, ALLOC_MAPS).is_err());
        assert!(eval_with(r#"not Missing == "y""#, ALLOC_MAPS).is_err());
    }

    #[test]
    fn bad_syntax_is_a_parse_error() {
        assert!(parse_error("ClientStatus ==").contains("no match found"));
        assert_eq!(
            parse_error("(a == b"),
            "1:8 (7): rule \"grouping\": Unmatched parentheses"
        );
        assert!(parse_error("ClientStatus <> running").contains("no match found"));
        assert_eq!(
            parse_error(r#"ClientStatus == "running"#),
            "1:25 (24): rule \"string\": Unterminated string literal"
        );
        assert!(
            parse_error(r#"JobID matches "(""#).contains("failed to compile regular expression")
        );
        assert!(Filter::parse("").is_err());
        // Bare numbers follow the grammar's decimal form; other bases need quotes.
        assert!(parse_error("CreateIndex == 0x11").contains("Invalid number literal"));
    }

    #[test]
    fn errors_render_as_their_message() {
        let err = FilterError::Eval("x at part 0: y".to_owned());
        assert_eq!(err.to_string(), "x at part 0: y");
        let err = FilterError::Parse("1:1 (0): z".to_owned());
        assert_eq!(err.to_string(), "1:1 (0): z");
    }

    #[test]
    fn random_inputs_never_panic() {
        const PIECES: &[&str] = &[
            " ",
            "(",
            ")",
            "\"",
            "`",
            "[",
            "]",
            ".",
            "/",
            "-",
            "0",
            "7",
            "é",
            "\\",
            "==",
            "!=",
            "and",
            "or",
            "not",
            "in",
            "is",
            "empty",
            "contains",
            "matches",
            "Meta",
            "Datacenters",
            "TaskStates",
            "redis",
            "State",
            "Ports",
            "Note",
            "\"/Meta/team\"",
            "\"x\"",
            "~1",
            "\"(\"",
            "1.5",
            "true",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let datum = alloc();
        let mut parsed = 0;
        for _ in 0..20_000 {
            let mut src = String::new();
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let len = (seed >> 60) as usize + 1;
            for _ in 0..len {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let pick = usize::try_from(seed >> 33).unwrap_or(0) % PIECES.len();
                src.push_str(PIECES[pick]);
                if seed & 1 == 0 {
                    src.push(' ');
                }
            }
            if let Ok(filter) = Filter::parse(&src) {
                parsed += 1;
                let _ = filter.matches(&datum, ALLOC_MAPS);
                let consul = Layout {
                    map_fields: ALLOC_MAPS,
                    any_element: true,
                };
                let _ = filter.matches_in(&datum, &consul);
                let _ = filter.matches(&Value::Null, &[]);
            }
        }
        assert!(parsed > 0);
    }

    fn entry() -> Value {
        json!({
            "Node": {"Node": "n1", "Meta": {"rack": "r1"}},
            "Service": {"ID": "web-1", "Tags": ["primary"], "Meta": {}},
            "Checks": [
                {"CheckID": "serfHealth", "Status": "passing", "ServiceTags": [], "Definition": {}},
                {"CheckID": "service:web-1", "Status": "critical", "ServiceTags": ["primary"],
                 "Definition": {"HTTP": "http://localhost"}}
            ],
            "Empty": []
        })
    }

    const ENTRY_MAPS: &[&str] = &["Node.Meta", "Service.Meta", "Checks.Definition"];

    fn consul(src: &str) -> Result<bool, FilterError> {
        let filter = Filter::parse(src).unwrap_or_else(|e| panic!("{src:?}: {e}"));
        filter.matches_in(
            &entry(),
            &Layout {
                map_fields: ENTRY_MAPS,
                any_element: true,
            },
        )
    }

    #[test]
    fn any_element_matches_when_some_element_does() {
        assert_eq!(consul(r#"Checks.Status == "critical""#), Ok(true));
        assert_eq!(consul(r#"Checks.Status == "warning""#), Ok(false));
        assert_eq!(consul(r#"Checks.Status != "passing""#), Ok(true));
        assert_eq!(consul(r#"Checks.CheckID != "x""#), Ok(true));
        assert_eq!(consul(r#""primary" in Checks.ServiceTags"#), Ok(true));
        assert_eq!(consul("Checks.ServiceTags is empty"), Ok(true));
        assert_eq!(consul(r#"Checks.CheckID matches "^service:""#), Ok(true));
        assert_eq!(consul(r#"not Checks.Status == "critical""#), Ok(false));
        assert_eq!(
            consul(r#"Checks.Definition.HTTP contains "localhost""#),
            Ok(true)
        );
        assert_eq!(consul(r#"Checks.Definition.TCP == "x""#), Ok(false));
        assert_eq!(consul(r#"Checks.1.Status == "critical""#), Ok(true));
        assert_eq!(consul(r#"Checks.0.Status == "critical""#), Ok(false));
        assert_eq!(consul(r#"Node.Meta.rack == "r1""#), Ok(true));
    }

    #[test]
    fn any_element_over_an_empty_array_matches_nothing() {
        assert_eq!(consul(r#"Empty.Status == "x""#), Ok(false));
        assert_eq!(consul(r#"Empty.Status != "x""#), Ok(false));
        assert_eq!(consul("Empty.Status is empty"), Ok(false));
    }

    #[test]
    fn any_element_still_reports_unknown_fields() {
        assert_eq!(
            consul(r#"Checks.Bogus == "x""#),
            Err(FilterError::Eval(
                "/Checks/Bogus at part 1: couldn't find key: struct field with name \"Bogus\""
                    .to_owned()
            ))
        );
        assert_eq!(
            consul(r#"Missing == "x""#),
            Err(FilterError::Eval(
                "/Missing at part 0: couldn't find key: struct field with name \"Missing\""
                    .to_owned()
            ))
        );
    }

    #[test]
    fn without_any_element_an_array_step_needs_an_index() {
        let filter = Filter::parse(r#"Checks.Status == "critical""#).unwrap();
        assert_eq!(
            filter.matches(&entry(), ENTRY_MAPS),
            Err(FilterError::Eval(
                "/Checks/Status at part 1: couldn't convert value \"Status\" to type int"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn one_filter_serves_many_data() {
        let filter = Filter::parse(r#"ClientStatus == "running" and "dc1" in Datacenters"#);
        let Ok(filter) = filter else {
            panic!("{filter:?}")
        };
        let items: Vec<Value> = (0..100)
            .map(|i| {
                json!({
                    "ClientStatus": if i % 2 == 0 { "running" } else { "pending" },
                    "Datacenters": ["dc1"],
                })
            })
            .collect();
        let hits = items
            .iter()
            .filter(|item| filter.matches(item, &[]) == Ok(true))
            .count();
        assert_eq!(hits, 50);
    }
}
