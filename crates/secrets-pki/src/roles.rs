//! `roles/<name>` (read, write, patch, delete) and `LIST roles`: the policy a leaf certificate
//! is issued or signed under, with every field Vault's role has and its defaults.
//!
//! Validation as upstream: `ttl` not above `max_ttl`; key type and size (rsa 2048/3072/4096/
//! 8192, ec 224/256/384/521, ed25519, any) with `signature_bits` 256/384/512 for RSA; parsable
//! `ext_key_usage_oids`, `policy_identifiers`, `allowed_other_sans`, `allowed_ip_sans_cidr`,
//! `cn_validations`, `not_after_bound` and `not_before_bound`; `no_store` wins over
//! `generate_lease` with a warning; an `issuer_ref` that resolves to nothing is only a warning
//! (it is resolved again at use).
//!
//! Invariant: a stored role has already passed these checks, so issuance never re-validates
//! its shape.

use secrets_sdk::{Data, EngineError, Response, fields};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::mount::Mount;
use crate::sans::{parse_cidr, parse_other_sans};
use crate::store::{DEFAULT_REF, ROLE_PREFIX};

/// A role, stored under `role/<name>` in the shape of its read response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Role {
    pub(crate) ttl: u64,
    pub(crate) max_ttl: u64,
    pub(crate) allow_localhost: bool,
    pub(crate) allowed_domains: Vec<String>,
    pub(crate) allowed_domains_template: bool,
    pub(crate) allow_globs_in_identity_templates: bool,
    pub(crate) allow_bare_domains: bool,
    pub(crate) allow_subdomains: bool,
    pub(crate) allow_glob_domains: bool,
    pub(crate) allow_wildcard_certificates: bool,
    pub(crate) allow_any_name: bool,
    pub(crate) allow_token_displayname: bool,
    pub(crate) enforce_hostnames: bool,
    pub(crate) allow_ip_sans: bool,
    pub(crate) allowed_ip_sans_cidr: Vec<String>,
    pub(crate) allowed_uri_sans: Vec<String>,
    pub(crate) allowed_uri_sans_template: bool,
    pub(crate) allowed_other_sans: Vec<String>,
    pub(crate) allowed_serial_numbers: Vec<String>,
    pub(crate) allowed_user_ids: Vec<String>,
    pub(crate) server_flag: bool,
    pub(crate) client_flag: bool,
    pub(crate) code_signing_flag: bool,
    pub(crate) email_protection_flag: bool,
    pub(crate) key_type: String,
    pub(crate) key_bits: i64,
    pub(crate) signature_bits: i64,
    pub(crate) use_pss: bool,
    pub(crate) key_usage: Vec<String>,
    pub(crate) ext_key_usage: Vec<String>,
    pub(crate) ext_key_usage_oids: Vec<String>,
    pub(crate) use_csr_common_name: bool,
    pub(crate) use_csr_sans: bool,
    pub(crate) ou: Vec<String>,
    pub(crate) organization: Vec<String>,
    pub(crate) country: Vec<String>,
    pub(crate) locality: Vec<String>,
    pub(crate) province: Vec<String>,
    pub(crate) street_address: Vec<String>,
    pub(crate) postal_code: Vec<String>,
    pub(crate) generate_lease: bool,
    pub(crate) no_store: bool,
    pub(crate) require_cn: bool,
    pub(crate) cn_validations: Vec<String>,
    pub(crate) policy_identifiers: Vec<String>,
    pub(crate) basic_constraints_valid_for_non_ca: bool,
    pub(crate) not_before_duration: u64,
    pub(crate) not_before: String,
    pub(crate) not_before_bound: String,
    pub(crate) not_after: String,
    pub(crate) not_after_bound: String,
    pub(crate) issuer_ref: String,
}

impl Default for Role {
    /// Upstream's defaults for a role written with no fields.
    fn default() -> Role {
        Role {
            ttl: 0,
            max_ttl: 0,
            allow_localhost: true,
            allowed_domains: Vec::new(),
            allowed_domains_template: false,
            allow_globs_in_identity_templates: false,
            allow_bare_domains: false,
            allow_subdomains: false,
            allow_glob_domains: false,
            allow_wildcard_certificates: true,
            allow_any_name: false,
            allow_token_displayname: false,
            enforce_hostnames: true,
            allow_ip_sans: true,
            allowed_ip_sans_cidr: Vec::new(),
            allowed_uri_sans: Vec::new(),
            allowed_uri_sans_template: false,
            allowed_other_sans: Vec::new(),
            allowed_serial_numbers: Vec::new(),
            allowed_user_ids: Vec::new(),
            server_flag: true,
            client_flag: true,
            code_signing_flag: false,
            email_protection_flag: false,
            key_type: "rsa".to_owned(),
            key_bits: 0,
            signature_bits: 0,
            use_pss: false,
            key_usage: ["DigitalSignature", "KeyAgreement", "KeyEncipherment"]
                .map(String::from)
                .to_vec(),
            ext_key_usage: Vec::new(),
            ext_key_usage_oids: Vec::new(),
            use_csr_common_name: true,
            use_csr_sans: true,
            ou: Vec::new(),
            organization: Vec::new(),
            country: Vec::new(),
            locality: Vec::new(),
            province: Vec::new(),
            street_address: Vec::new(),
            postal_code: Vec::new(),
            generate_lease: false,
            no_store: false,
            require_cn: true,
            cn_validations: vec!["email".to_owned(), "hostname".to_owned()],
            policy_identifiers: Vec::new(),
            basic_constraints_valid_for_non_ca: false,
            not_before_duration: 30,
            not_before: String::new(),
            not_before_bound: "permit".to_owned(),
            not_after: String::new(),
            not_after_bound: "permit".to_owned(),
            issuer_ref: DEFAULT_REF.to_owned(),
        }
    }
}

/// Every field a role write takes.
pub(crate) const ROLE_FIELDS: &[&str] = &[
    "name",
    "backend",
    "ttl",
    "max_ttl",
    "allow_localhost",
    "allowed_domains",
    "allowed_domains_template",
    "allow_globs_in_identity_templates",
    "allow_bare_domains",
    "allow_subdomains",
    "allow_glob_domains",
    "allow_wildcard_certificates",
    "allow_any_name",
    "allow_token_displayname",
    "enforce_hostnames",
    "allow_ip_sans",
    "allowed_ip_sans_cidr",
    "allowed_uri_sans",
    "allowed_uri_sans_template",
    "allowed_other_sans",
    "allowed_serial_numbers",
    "allowed_user_ids",
    "server_flag",
    "client_flag",
    "code_signing_flag",
    "email_protection_flag",
    "key_type",
    "key_bits",
    "signature_bits",
    "use_pss",
    "key_usage",
    "ext_key_usage",
    "ext_key_usage_oids",
    "use_csr_common_name",
    "use_csr_sans",
    "ou",
    "organization",
    "country",
    "locality",
    "province",
    "street_address",
    "postal_code",
    "generate_lease",
    "no_store",
    "require_cn",
    "cn_validations",
    "policy_identifiers",
    "basic_constraints_valid_for_non_ca",
    "not_before_duration",
    "not_before",
    "not_before_bound",
    "not_after",
    "not_after_bound",
    "issuer_ref",
];

impl Role {
    /// Sets every field present in `data` (JSON `null` counts as absent).
    fn apply(&mut self, data: &Data) -> Result<(), EngineError> {
        macro_rules! set_bool {
            ($($field:ident),*) => {$(
                if let Some(value) = fields::bool(data, stringify!($field))? {
                    self.$field = value;
                }
            )*};
        }
        macro_rules! set_list {
            ($($field:ident),*) => {$(
                if let Some(value) = fields::comma_list(data, stringify!($field))? {
                    self.$field = value;
                }
            )*};
        }
        set_bool!(
            allow_localhost,
            allowed_domains_template,
            allow_globs_in_identity_templates,
            allow_bare_domains,
            allow_subdomains,
            allow_glob_domains,
            allow_wildcard_certificates,
            allow_any_name,
            allow_token_displayname,
            enforce_hostnames,
            allow_ip_sans,
            allowed_uri_sans_template,
            server_flag,
            client_flag,
            code_signing_flag,
            email_protection_flag,
            use_pss,
            use_csr_common_name,
            use_csr_sans,
            generate_lease,
            no_store,
            require_cn,
            basic_constraints_valid_for_non_ca
        );
        set_list!(
            allowed_domains,
            allowed_ip_sans_cidr,
            allowed_uri_sans,
            allowed_other_sans,
            allowed_serial_numbers,
            allowed_user_ids,
            key_usage,
            ext_key_usage,
            ext_key_usage_oids,
            ou,
            organization,
            country,
            locality,
            province,
            street_address,
            postal_code,
            cn_validations
        );
        if let Some(ttl) = fields::duration(data, "ttl")? {
            self.ttl = ttl.as_secs();
        }
        if let Some(ttl) = fields::duration(data, "max_ttl")? {
            self.max_ttl = ttl.as_secs();
        }
        if let Some(ttl) = fields::duration(data, "not_before_duration")? {
            self.not_before_duration = ttl.as_secs();
        }
        if let Some(value) = fields::string(data, "key_type")? {
            self.key_type = value;
        }
        if let Some(value) = fields::int(data, "key_bits")? {
            self.key_bits = value;
        }
        if let Some(value) = fields::int(data, "signature_bits")? {
            self.signature_bits = value;
        }
        for (name, slot) in [
            ("not_before", &mut self.not_before),
            ("not_before_bound", &mut self.not_before_bound),
            ("not_after", &mut self.not_after),
            ("not_after_bound", &mut self.not_after_bound),
            ("issuer_ref", &mut self.issuer_ref),
        ] {
            if let Some(value) = fields::string(data, name)? {
                *slot = value;
            }
        }
        if let Some(policies) = policy_identifiers(data)? {
            self.policy_identifiers = policies;
        }
        Ok(())
    }

    /// Upstream's checks, normalising key sizes and CN validations; returns warnings.
    fn validate(&mut self) -> Result<(), EngineError> {
        let bad = |msg: String| Err(EngineError::BadRequest(msg));
        if self.max_ttl > 0 && self.ttl > self.max_ttl {
            return bad(r#""ttl" value must be less than "max_ttl" value"#.to_owned());
        }
        match self.key_type.as_str() {
            "rsa" => {
                if self.key_bits == 0 {
                    self.key_bits = 2048;
                }
                if self.key_bits < 2048 {
                    return bad(format!(
                        "RSA keys < 2048 bits are unsafe and not supported: got {}",
                        self.key_bits
                    ));
                }
                if ![2048, 3072, 4096, 8192].contains(&self.key_bits) {
                    return bad(format!(
                        "unsupported bit length for RSA key: {}",
                        self.key_bits
                    ));
                }
                if self.signature_bits == 0 {
                    self.signature_bits = 256;
                }
                if ![256, 384, 512].contains(&self.signature_bits) {
                    return bad(format!(
                        "unsupported hash signature algorithm: {}",
                        self.signature_bits
                    ));
                }
            }
            "ec" => {
                if self.key_bits == 0 {
                    self.key_bits = 256;
                }
                if ![224, 256, 384, 521].contains(&self.key_bits) {
                    return bad(format!(
                        "unsupported bit length for EC key: {}",
                        self.key_bits
                    ));
                }
            }
            "ed25519" | "any" => {}
            other => return bad(format!("unknown key type {other}")),
        }
        for oid in &self.ext_key_usage_oids {
            if crate::der::parse_oid(oid).is_none() {
                return bad(format!(
                    "{oid:?} could not be parsed as a valid oid for an extended key usage"
                ));
            }
        }
        if !self.policy_identifiers.is_empty() {
            crate::template::policies_value(&self.policy_identifiers)
                .map_err(EngineError::BadRequest)?;
        }
        match self.allowed_other_sans.as_slice() {
            [] => {}
            [one] if one == "*" => {}
            list => {
                parse_other_sans(list).map_err(|err| {
                    EngineError::BadRequest(format!("error parsing allowed_other_sans: {err}"))
                })?;
            }
        }
        let mut cidrs = Vec::new();
        for cidr in &self.allowed_ip_sans_cidr {
            let net = parse_cidr(cidr).ok_or_else(|| {
                EngineError::BadRequest(format!(
                    "error parsing allowed_ip_sans_cidr: invalid CIDR address: {cidr}"
                ))
            })?;
            cidrs.push(net.to_string());
        }
        self.allowed_ip_sans_cidr = cidrs;
        match self.not_after_bound.as_str() {
            "permit" | "forbid" | "ttl-limited" => {}
            other if crate::validity::parse_time(other).is_ok() => {}
            _ => return bad("Unknown value for field `not_after_bound`. Possible values are `permit`, `ttl-limited`, `forbid`, or an explicit timestamp.".to_owned()),
        }
        match self.not_before_bound.as_str() {
            "permit" | "forbid" | "duration" => {}
            _ => return bad("Unknown value for field `not_before_bound`. Possible values are `permit` `duration` or `forbid`".to_owned()),
        }
        if self.issuer_ref.is_empty() {
            self.issuer_ref = DEFAULT_REF.to_owned();
        }
        self.cn_validations = check_cn_validations(&self.cn_validations)?;
        Ok(())
    }

    /// The read response's data.
    pub(crate) fn to_data(&self) -> Data {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => Data::new(),
        }
    }

    /// A role's key type when it is a concrete one (not `any`).
    pub(crate) fn is_any_key(&self) -> bool {
        self.key_type == "any"
    }
}

/// `policy_identifiers`: a comma list of OIDs, or a JSON string holding a list of objects
/// (`[{"oid": ..., "notice": ..., "cps": ...}]`), each kept as its JSON text.
fn policy_identifiers(data: &Data) -> Result<Option<Vec<String>>, EngineError> {
    if let Some(Value::String(text)) = data.get("policy_identifiers")
        && let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text)
    {
        return Ok(Some(items.iter().map(Value::to_string).collect()));
    }
    fields::comma_list(data, "policy_identifiers")
}

/// Vault's `checkCNValidations`.
fn check_cn_validations(validations: &[String]) -> Result<Vec<String>, EngineError> {
    if validations.is_empty() {
        return Ok(vec!["email".to_owned(), "hostname".to_owned()]);
    }
    let bad = |msg: String| Err(EngineError::BadRequest(msg));
    let mut out: Vec<String> = Vec::new();
    for validation in validations {
        let lower = validation.to_ascii_lowercase();
        match lower.as_str() {
            "disabled" | "email" | "hostname" => {
                if out.contains(&lower) {
                    return bad(format!(
                        "cn_validations value incorrect: `{lower}` specified multiple times"
                    ));
                }
            }
            _ => {
                return bad(format!(
                    "cn_validations value incorrect: unknown type: `{validation}`"
                ));
            }
        }
        out.push(lower);
    }
    if out.iter().any(|v| v == "disabled") && out.len() > 1 {
        return bad("cn_validations value incorrect: cannot specify `disabled` along with `email` or `hostname`".to_owned());
    }
    Ok(out)
}

pub(crate) async fn load(mount: &Mount, name: &str) -> Result<Option<Role>, EngineError> {
    mount.store.get(&format!("{ROLE_PREFIX}{name}")).await
}

/// A role that must exist (issuance): 400 `unknown role: <name>` otherwise, as upstream.
pub(crate) async fn require(mount: &Mount, name: &str) -> Result<Role, EngineError> {
    load(mount, name)
        .await?
        .ok_or_else(|| EngineError::BadRequest(format!("unknown role: {name}")))
}

pub(crate) async fn read(mount: &Mount, name: &str) -> Result<Option<Response>, EngineError> {
    Ok(load(mount, name)
        .await?
        .map(|role| Response::data(role.to_data())))
}

pub(crate) async fn list(mount: &Mount) -> Result<Option<Response>, EngineError> {
    let keys = mount.store.list(ROLE_PREFIX).await?;
    Ok(Some(Response::list(keys)))
}

pub(crate) async fn delete(mount: &Mount, name: &str) -> Result<Option<Response>, EngineError> {
    mount.store.delete(&format!("{ROLE_PREFIX}{name}")).await?;
    Ok(None)
}

/// `POST roles/<name>`: fields not given take upstream's defaults.
pub(crate) async fn write(
    mount: &Mount,
    name: &str,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    save(mount, name, Role::default(), data).await
}

/// `PATCH roles/<name>`: fields not given keep their stored values.
pub(crate) async fn patch(
    mount: &Mount,
    name: &str,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let Some(old) = load(mount, name).await? else {
        return Err(EngineError::BadRequest(
            "Unable to fetch role entry to patch".to_owned(),
        ));
    };
    save(mount, name, old, data).await
}

async fn save(
    mount: &Mount,
    name: &str,
    mut role: Role,
    data: &Data,
) -> Result<Option<Response>, EngineError> {
    let generate_lease_asked = fields::bool(data, "generate_lease")?;
    role.apply(data)?;
    role.validate()?;
    let mut response = Response::default();
    response
        .warnings
        .extend(fields::unknown_warning(data, ROLE_FIELDS));
    if role.no_store {
        if generate_lease_asked == Some(true)
            || (generate_lease_asked.is_none() && role.generate_lease)
        {
            response.warnings.push("mutually exclusive values no_store=true and generate_lease=true were both specified; no_store=true takes priority".to_owned());
        }
        role.generate_lease = false;
    } else if role.generate_lease {
        response.warnings.push("it is encouraged to disable generate_lease and rely on PKI's native capabilities when possible; this option can cause instance-wide issues with large numbers of issued certificates".to_owned());
    }
    if mount
        .store
        .resolve_issuer(&role.issuer_ref)
        .await?
        .is_none()
    {
        response.warnings.push(if role.issuer_ref == DEFAULT_REF {
            "Issuing Certificate was set to default, but no default issuing certificate (configurable at /config/issuers) is currently set".to_owned()
        } else {
            format!(
                "Issuing Certificate was set to {} but no issuing certificate currently has that name",
                role.issuer_ref
            )
        });
    }
    mount
        .store
        .put(&format!("{ROLE_PREFIX}{name}"), &role)
        .await?;
    response.data = Some(role.to_data());
    Ok(Some(response))
}

/// A role's read shape as JSON.
#[cfg(test)]
fn to_json(role: &Role) -> Value {
    Value::Object(role.to_data())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(value: Value) -> Data {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_role_written_empty_has_upstreams_defaults_after_validation() {
        let mut role = Role::default();
        role.validate().unwrap();
        let json = to_json(&role);
        assert_eq!(json["key_type"], "rsa");
        assert_eq!(json["key_bits"], 2048);
        assert_eq!(json["signature_bits"], 256);
        assert_eq!(json["allow_localhost"], true);
        assert_eq!(json["allow_ip_sans"], true);
        assert_eq!(json["enforce_hostnames"], true);
        assert_eq!(json["server_flag"], true);
        assert_eq!(json["client_flag"], true);
        assert_eq!(json["issuer_ref"], "default");
        assert_eq!(json["not_before_duration"], 30);
        assert_eq!(json["cn_validations"], json!(["email", "hostname"]));
        assert_eq!(
            json["key_usage"],
            json!(["DigitalSignature", "KeyAgreement", "KeyEncipherment"])
        );
    }

    #[test]
    fn validation_refuses_what_upstream_refuses() {
        let cases = [
            (
                json!({"ttl": "2h", "max_ttl": "1h"}),
                "\"ttl\" value must be less than",
            ),
            (json!({"key_bits": 1024}), "RSA keys < 2048 bits"),
            (
                json!({"key_type": "ec", "key_bits": 300}),
                "unsupported bit length for EC key",
            ),
            (json!({"key_type": "dsa"}), "unknown key type dsa"),
            (
                json!({"signature_bits": 100}),
                "unsupported hash signature algorithm",
            ),
            (
                json!({"allowed_other_sans": "1.2.3;UTF16:x"}),
                "error parsing allowed_other_sans",
            ),
            (
                json!({"allowed_ip_sans_cidr": "10.0.0.0/99"}),
                "error parsing allowed_ip_sans_cidr",
            ),
            (json!({"cn_validations": "bogus"}), "unknown type"),
            (
                json!({"cn_validations": "disabled,email"}),
                "cannot specify `disabled`",
            ),
            (json!({"not_after_bound": "sometimes"}), "not_after_bound"),
            (json!({"ext_key_usage_oids": "1.x"}), "could not be parsed"),
        ];
        for (input, expected) in cases {
            let mut role = Role::default();
            role.apply(&data(input.clone())).unwrap();
            let err = role.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "{input}: {err}");
        }
    }

    #[test]
    fn policy_identifiers_take_oids_or_a_json_list() {
        let plain =
            policy_identifiers(&data(json!({"policy_identifiers": "1.2.3,1.2.4"}))).unwrap();
        assert_eq!(plain.unwrap(), vec!["1.2.3", "1.2.4"]);
        let qualified = policy_identifiers(&data(json!({
            "policy_identifiers": r#"[{"oid":"1.3.6.1.4.1.7.8","notice":"I am a user Notice"}]"#
        })))
        .unwrap()
        .unwrap();
        assert_eq!(qualified.len(), 1);
        assert!(qualified[0].contains("1.3.6.1.4.1.7.8"));
    }
}
