//! Tests of the jobspec parser and canonicalizer: the real-world job files under `testdata/`,
//! every error path, the function library, and `canonicalize` (and its registration variant)
//! per job type.

use std::cell::Cell;
use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use super::diag::Source;
use super::eval::{Env, Mode, Scope, eval};
use super::*;

const SERVICE: &str = include_str!("../testdata/service.nomad.hcl");
const SERVICE_VARS: &str = include_str!("../testdata/service.vars.hcl");
const BATCH_PERIODIC: &str = include_str!("../testdata/batch-periodic.nomad.hcl");
const PARAMETERIZED: &str = include_str!("../testdata/parameterized.nomad.hcl");
const CONSTRAINTS: &str = include_str!("../testdata/constraints.nomad.hcl");
const CONNECT: &str = include_str!("../testdata/connect.nomad.hcl");
const SYSTEM: &str = include_str!("../testdata/system.nomad.hcl");

fn no_flags() -> BTreeMap<String, String> {
    BTreeMap::new()
}

fn flags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn job(hcl: &str) -> Json {
    match parse(hcl, "", &no_flags()) {
        Ok(job) => job,
        Err(err) => panic!("parse failed: {err}"),
    }
}

fn error(hcl: &str) -> String {
    match parse(hcl, "", &no_flags()) {
        Ok(job) => panic!("parse unexpectedly succeeded: {job}"),
        Err(err) => err.0,
    }
}

fn service_job() -> Json {
    parse(SERVICE, SERVICE_VARS, &flags(&[("count", "3")])).unwrap()
}

/// Wraps a task body into a minimal job.
fn in_task(task_body: &str) -> String {
    format!(
        "job \"example\" {{\n  group \"group\" {{\n    task \"task\" {{\n      driver = \"docker\"\n{task_body}\n    }}\n  }}\n}}\n"
    )
}

fn task_of(job: &Json) -> &Json {
    &job["TaskGroups"][0]["Tasks"][0]
}

fn eval_expr(text: &str) -> Result<Json, String> {
    let expr = hcl::edit::parser::parse_expr(text).map_err(|e| e.to_string())?;
    let steps = Cell::new(0);
    let env = Env::new(Source::new("test.hcl", text), Mode::Job, &steps);
    eval(&expr, &Scope::new(&env))
        .map(|v| v.to_json())
        .map_err(|d| d.to_string())
}

fn value(text: &str) -> Json {
    match eval_expr(text) {
        Ok(v) => v,
        Err(e) => panic!("{text}: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Real-world job files.

#[test]
fn service_job_takes_values_from_flags_over_var_file_over_defaults() {
    let job = service_job();
    assert_eq!(job["ID"], "web");
    assert_eq!(job["Name"], "web");
    assert_eq!(job["Region"], "eu", "var-file overrides the default");
    assert_eq!(job["Datacenters"], json!(["dc1"]), "default");
    assert_eq!(job["TaskGroups"][0]["Count"], 6, "-var count=3, times two");
    assert_eq!(job["TaskGroups"][1]["Count"], 0, "bool default false");
    assert_eq!(task_of(&job)["Config"]["image"], "nginx:1.25");
    assert_eq!(job["Priority"], 60);
    assert_eq!(job["Type"], "service");
}

#[test]
fn service_job_has_every_block_in_api_shape() {
    let job = service_job();
    assert_eq!(job["Meta"], json!({"owner": "team-a", "version": "3"}));
    assert_eq!(
        job["Constraints"],
        json!([{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}])
    );
    assert_eq!(
        job["Update"],
        json!({
            "MaxParallel": 2,
            "MinHealthyTime": 15_000_000_000_i64,
            "HealthyDeadline": 180_000_000_000_i64,
            "AutoRevert": true,
            "Canary": 1
        })
    );
    let group = &job["TaskGroups"][0];
    assert_eq!(group["Name"], "frontend");
    assert_eq!(group["EphemeralDisk"], json!({"SizeMB": 500}));
    assert_eq!(
        group["RestartPolicy"],
        json!({"Attempts": 5, "Delay": 25_000_000_000_i64})
    );
    assert_eq!(
        group["Networks"],
        json!([{
            "Mode": "bridge",
            "DynamicPorts": [{"Label": "http", "To": 8080}],
            "ReservedPorts": [{"Label": "admin", "Value": 9090}]
        }])
    );
    assert_eq!(
        group["Services"],
        json!([{
            "Name": "demo-web",
            "PortLabel": "http",
            "Provider": "nomad",
            "Tags": ["web", "v1.25"],
            "Checks": [{
                "Name": "alive",
                "Type": "http",
                "Path": "/health",
                "Interval": 10_000_000_000_i64,
                "Timeout": 2_000_000_000_i64,
                "Header": {"Authorization": ["Bearer x"]}
            }]
        }])
    );
    let server = task_of(&job);
    assert_eq!(server["Name"], "server");
    assert_eq!(server["Driver"], "docker");
    assert_eq!(server["KillTimeout"], 20_000_000_000_i64);
    assert_eq!(server["KillSignal"], "SIGTERM");
    assert_eq!(
        server["Resources"],
        json!({"CPU": 500, "MemoryMB": 256, "MemoryMaxMB": 512})
    );
    let sidecar = &job["TaskGroups"][0]["Tasks"][1];
    assert_eq!(
        sidecar["Lifecycle"],
        json!({"Hook": "prestart", "Sidecar": true})
    );
    assert_eq!(
        sidecar["LogConfig"],
        json!({"MaxFiles": 3, "MaxFileSizeMB": 5})
    );
    assert_eq!(
        sidecar["Artifacts"],
        json!([{
            "GetterSource": "https://example.com/tool.tar.gz",
            "RelativeDest": "local/tool",
            "GetterOptions": {"checksum": "sha256:abcd"}
        }])
    );
    let redis_service = &job["TaskGroups"][1]["Tasks"][0]["Services"][0];
    assert_eq!(
        redis_service["PortLabel"], "6379",
        "numbers convert to strings"
    );
}

#[test]
fn config_keeps_keys_and_wraps_nested_blocks_like_jobspec2() {
    let job = service_job();
    assert_eq!(
        task_of(&job)["Config"],
        json!({
            "image": "nginx:1.25",
            "ports": ["http"],
            "args": ["--alloc", "${NOMAD_ALLOC_ID}", "--dc", "${node.datacenter}"],
            "labels": [{"team": "a"}],
            "logging": [{"type": "json-file"}]
        })
    );
    let job = self::job(&in_task(
        r#"
      config {
        mount "bind" {
          source = "/a"
          readonly = true
        }
        mount "bind" {
          source = "/b"
        }
        ratio = 1.5
        count = 3
        nothing = null
      }"#,
    ));
    assert_eq!(
        task_of(&job)["Config"],
        json!({
            "mount": [{"bind": [{"source": "/a", "readonly": true}]}, {"bind": [{"source": "/b"}]}],
            "ratio": 1.5,
            "count": 3,
            "nothing": null
        })
    );
    let empty = self::job(&in_task("      config {}"));
    assert_eq!(task_of(&empty)["Config"], json!({}));
}

#[test]
fn runtime_interpolations_survive_in_env_args_templates_and_constraints() {
    let job = service_job();
    let server = task_of(&job);
    assert_eq!(
        server["Env"],
        json!({
            "ALLOC": "${NOMAD_ALLOC_ID}",
            "NODE": "${node.unique.id}",
            "REGION": "eu",
            "PORT": "8080",
            "MIXED": "eu-${NOMAD_ALLOC_INDEX}"
        })
    );
    let templates = &server["Templates"];
    assert_eq!(
        templates[0]["EmbeddedTmpl"],
        "alloc = {{ env \"NOMAD_ALLOC_ID\" }}\nregion = eu\nkernel = ${attr.kernel.name}\n",
        "<<- strips the common indent, HCL interpolation mixes with runtime names"
    );
    assert_eq!(templates[1]["EmbeddedTmpl"], "KEY={{ key \"app/key\" }}\n");
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][1]["Config"]["args"],
        json!(["-c", "echo ${NOMAD_TASK_NAME}; sleep 3600"])
    );
}

#[test]
fn undefined_references_keep_their_exact_text() {
    for text in [
        "plain",
        "foo-${BAR}",
        "foo-${attr.network.dev-us-east1-relay-vpc.external-ip.0}",
        r#"${env["BLAH"]}"#,
        r#"${mixed-indexing.0[3]["FOO"].5}"#,
        r#"with spaces ${   root.  field[  "FOO"].5  }"#,
        "${meta.rack}-${node.class}",
    ] {
        let hcl = format!(
            "job \"example\" {{\n  region = \"{}\"\n}}\n",
            text.replace('"', "\\\"")
        );
        let hcl = hcl.replace("\\\"", "\"");
        assert_eq!(job(&hcl)["Region"], text, "{text}");
    }
    let job =
        job("job \"example\" {\n  region = meta.mytest\n  namespace = upper(node.class)\n}\n");
    assert_eq!(job["Region"], "${meta.mytest}");
    assert_eq!(job["Namespace"], "${NODE.CLASS}");
}

#[test]
fn templates_get_jobspec2_defaults_and_heredocs_keep_newlines() {
    let job = service_job();
    let template = &task_of(&job)["Templates"][0];
    assert_eq!(template["DestPath"], "local/app.conf");
    assert_eq!(template["ChangeMode"], "signal");
    assert_eq!(template["ChangeSignal"], "SIGHUP");
    assert_eq!(template["Perms"], "0644");
    assert_eq!(template["Splay"], 5_000_000_000_i64);
    assert_eq!(template["ErrMissingKey"], false);
    let second = &task_of(&job)["Templates"][1];
    assert_eq!(second["ChangeMode"], "restart");
    assert_eq!(second["Envvars"], true);

    let job = self::job(&in_task(
        r#"
      template {
        data = "{{ with secret \"kv/x\" }}{{ .Data.v }}{{ end }}"
        destination = "secrets/x"
        change_mode = "script"
        change_script {
          command = "/reload.sh"
          fail_on_error = true
        }
        wait {
          min = "2s"
          max = "10s"
        }
      }"#,
    ));
    let template = &task_of(&job)["Templates"][0];
    assert_eq!(
        template["EmbeddedTmpl"],
        "{{ with secret \"kv/x\" }}{{ .Data.v }}{{ end }}"
    );
    assert_eq!(
        template["ChangeScript"],
        json!({"Command": "/reload.sh", "FailOnError": true, "Args": [], "Timeout": 5_000_000_000_i64, "RunOnFirstRender": false})
    );
    assert_eq!(
        template["Wait"],
        json!({"Min": 2_000_000_000_i64, "Max": 10_000_000_000_i64})
    );
}

#[test]
fn periodic_batch_job_gets_spec_type_cron() {
    let job = parse(BATCH_PERIODIC, "", &no_flags()).unwrap();
    assert_eq!(job["Type"], "batch");
    assert_eq!(
        job["Periodic"],
        json!({
            "Specs": ["0 */6 * * *", "30 1 * * *"],
            "SpecType": "cron",
            "ProhibitOverlap": true,
            "TimeZone": "Europe/Paris"
        })
    );
    assert_eq!(
        job["Reschedule"],
        json!({"Attempts": 2, "Interval": 3_600_000_000_000_i64, "Unlimited": false})
    );
    assert_eq!(
        task_of(&job)["Resources"],
        json!({"Cores": 2, "MemoryMB": 1024})
    );
    let single = self::job(
        "job \"p\" {\n  periodic {\n    cron = \"@daily\"\n    enabled = false\n  }\n}\n",
    );
    assert_eq!(
        single["Periodic"],
        json!({"Spec": "@daily", "SpecType": "cron", "Enabled": false})
    );
}

#[test]
fn parameterized_job_has_payload_config_and_dispatch_payload() {
    let job = parse(PARAMETERIZED, "", &no_flags()).unwrap();
    assert_eq!(
        job["ParameterizedJob"],
        json!({"Payload": "required", "MetaRequired": ["customer"], "MetaOptional": ["priority"]})
    );
    assert_eq!(
        task_of(&job)["DispatchPayload"],
        json!({"File": "payload.json"})
    );
    assert_eq!(
        task_of(&job)["Config"]["args"],
        json!(["${NOMAD_META_customer}", "local/payload.json"])
    );
}

#[test]
fn constraints_affinities_and_spreads_in_every_form() {
    let job = parse(CONSTRAINTS, "", &no_flags()).unwrap();
    let c = |l: &str, r: &str, op: &str| json!({"LTarget": l, "RTarget": r, "Operand": op});
    assert_eq!(
        job["Constraints"],
        json!([
            c("", "true", "distinct_hosts"),
            c("${meta.rack}", "", "distinct_property"),
            c("${attr.os.name}", "^(ubuntu|debian)$", "regexp"),
            c("${attr.nomad.version}", ">= 1.6.0", "version"),
            c("${attr.kernel.version}", ">= 5.0.0", "semver"),
            c("${meta.tags}", "ssd", "set_contains"),
            c("${meta.zones}", "a,b", "set_contains_any"),
            c("${meta.features}", "x,y", "set_contains_all"),
            c("${meta.gpu}", "", "is_set"),
            c("${meta.spot}", "", "is_not_set"),
            c("${node.class}", "tiny", "!="),
        ])
    );
    assert_eq!(
        job["Affinities"],
        json!([
            {"LTarget": "${node.datacenter}", "RTarget": "dc1", "Operand": "=", "Weight": -20},
            {"LTarget": "${meta.env}", "RTarget": "prod", "Operand": "="}
        ])
    );
    assert_eq!(
        job["Spreads"],
        json!([{
            "Attribute": "${node.datacenter}",
            "Weight": 70,
            "SpreadTarget": [{"Value": "dc1", "Percent": 60}, {"Value": "dc2", "Percent": 40}]
        }])
    );
}

#[test]
fn constraint_operator_form_equals_shorthand_form() {
    let long = job(
        "job \"x\" {\n  constraint {\n    operator = \"distinct_hosts\"\n    value = \"true\"\n  }\n  constraint {\n    operator = \"distinct_property\"\n    attribute = \"${meta.rack}\"\n    value = \"1\"\n  }\n}\n",
    );
    let short = job(
        "job \"x\" {\n  constraint {\n    distinct_hosts = true\n  }\n  constraint {\n    distinct_property = \"${meta.rack}\"\n    value = \"1\"\n  }\n}\n",
    );
    assert_eq!(long, short);
}

#[test]
fn connect_service_with_sidecar_and_upstreams() {
    let job = parse(CONNECT, "", &no_flags()).unwrap();
    let service = &job["TaskGroups"][0]["Services"][0];
    assert_eq!(service["Name"], "count-api");
    assert_eq!(
        service["Connect"]["SidecarService"]["Proxy"]["Upstreams"],
        json!([{"DestinationName": "count-db", "LocalBindPort": 5432}])
    );
    assert_eq!(
        service["Connect"]["SidecarTask"]["Resources"],
        json!({"CPU": 50, "MemoryMB": 64})
    );
    assert_eq!(job["TaskGroups"][0]["Networks"][0]["Mode"], "bridge");
    assert_eq!(
        job["TaskGroups"][0]["Volumes"],
        json!({"certs": {"Name": "certs", "Type": "host", "Source": "certs", "ReadOnly": true}})
    );
    assert_eq!(
        task_of(&job)["VolumeMounts"],
        json!([{"Volume": "certs", "Destination": "/etc/certs"}])
    );
    assert_eq!(
        job["TaskGroups"][0]["Scaling"],
        json!({"Min": 1, "Max": 5, "Enabled": true, "Type": "horizontal", "Policy": {"cooldown": "1m"}})
    );
}

#[test]
fn system_job_vault_identity_and_top_level_task() {
    let job = parse(SYSTEM, "", &no_flags()).unwrap();
    assert_eq!(job["Type"], "system");
    // A top-level task becomes its own group, ahead of the declared groups.
    assert_eq!(job["TaskGroups"][0]["Name"], "collector");
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Name"], "collector");
    assert_eq!(job["TaskGroups"][1]["Name"], "agents");
    // Job-level vault reaches every task, normalized.
    let vault = json!({"Policies": ["metrics"], "Env": true, "DisableFile": false, "ChangeMode": "restart"});
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Vault"], vault);
    let agent = &job["TaskGroups"][1]["Tasks"][0];
    assert_eq!(agent["Vault"]["Role"], "agent", "the task's own vault wins");
    // The default identity moves to Identity; named ones stay.
    assert_eq!(agent["Identity"], json!({"Env": true, "File": true}));
    assert_eq!(
        agent["Identities"],
        json!([{"Name": "vault_default", "Audience": ["vault.io"], "TTL": 3_600_000_000_000_i64}])
    );
    assert_eq!(
        agent["Schedule"],
        json!({"Cron": {"Start": "0 8 * * *", "End": "0 18", "Timezone": "UTC"}})
    );
    assert_eq!(
        agent["Actions"],
        json!([{"Name": "flush", "Command": "/bin/flush", "Args": ["-now"]}])
    );
    assert_eq!(
        agent["ScalingPolicies"],
        json!([{"Max": 500, "Type": "vertical_cpu", "Policy": {"cooldown": "5m"}}])
    );
    assert_eq!(
        job["TaskGroups"][1]["Disconnect"],
        json!({"LostAfter": 3_600_000_000_000_i64, "Replace": false})
    );
}

#[test]
fn meta_and_env_accept_block_and_attribute_forms() {
    let block = job(
        "job \"e\" {\n  meta {\n    source = \"job\"\n  }\n  group \"g\" {\n    meta {\n      source = \"group\"\n    }\n    task \"t\" {\n      meta {\n        source = \"task\"\n      }\n    }\n  }\n}\n",
    );
    let attr = job(
        "job \"e\" {\n  meta = {\n    source = \"job\"\n  }\n  group \"g\" {\n    meta = {\n      source = \"group\"\n    }\n    task \"t\" {\n      meta = {\n        source = \"task\"\n      }\n    }\n  }\n}\n",
    );
    assert_eq!(block, attr);
    assert_eq!(block["TaskGroups"][0]["Meta"], json!({"source": "group"}));
    let env = job(&in_task(
        "      env = {\n        \"key.dot\" = \"val1\"\n        key_plain : \"val2\"\n      }",
    ));
    assert_eq!(
        task_of(&env)["Env"],
        json!({"key.dot": "val1", "key_plain": "val2"})
    );
    let env = job(&in_task(
        "      env = {for k in [\"a\", \"b\"]: k => \"val-${k}\" }",
    ));
    assert_eq!(task_of(&env)["Env"], json!({"a": "val-a", "b": "val-b"}));
    let env = job(&in_task("      env = {}"));
    assert_eq!(task_of(&env)["Env"], json!({}));
}

#[test]
fn dynamic_blocks_expand_with_iterator_and_labels() {
    let job = job(r#"job "example" {
  dynamic "group" {
    for_each = [
      { name = "groupA", idx = 1 },
      { name = "groupB", idx = 2 },
    ]
    labels = [group.value.name]
    content {
      count = group.value.idx
      service {
        port = group.value.name
      }
      task "simple" {
        driver = "raw_exec"
        config {
          command = group.value.name
        }
        env {
          ID = format("id:%s", group.value.idx)
        }
        dynamic "template" {
          for_each = { a = "x", b = "y" }
          iterator = tpl
          content {
            destination = "local/${tpl.key}"
            data        = tpl.value
          }
        }
      }
    }
  }
}
"#);
    assert_eq!(job["TaskGroups"][0]["Name"], "groupA");
    assert_eq!(job["TaskGroups"][1]["Name"], "groupB");
    assert_eq!(job["TaskGroups"][1]["Count"], 2);
    assert_eq!(job["TaskGroups"][0]["Services"][0]["PortLabel"], "groupA");
    assert_eq!(
        job["TaskGroups"][1]["Tasks"][0]["Config"]["command"],
        "groupB"
    );
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Env"]["ID"], "id:1");
    let templates = &job["TaskGroups"][0]["Tasks"][0]["Templates"];
    assert_eq!(templates[0]["DestPath"], "local/a");
    assert_eq!(templates[1]["EmbeddedTmpl"], "y");
}

#[test]
fn locals_evaluate_in_any_order_and_lookups_work() {
    let hcl = r#"
variable "env" {
  description = "target environment"
}
locals {
  env = lookup(local.environments, var.env, { count = 0, dcs = [] })
  environments = {
    prod    = { count = 20, dcs = ["prod-dc1", "prod-dc2"] },
    staging = { count = 3, dcs = ["dc1"] },
  }
}
job "webserver" {
  datacenters = local.env.dcs
  group "web" {
    count = local.env.count
    task "server" {
      driver = "docker"
      config {
        args = ["-text", "Hello from ${var.env}"]
      }
    }
  }
}
"#;
    for (env, dcs, count) in [
        ("prod", json!(["prod-dc1", "prod-dc2"]), 20),
        ("staging", json!(["dc1"]), 3),
        ("unknown", json!([]), 0),
    ] {
        let job = parse(hcl, "", &flags(&[("env", env)])).unwrap();
        assert_eq!(job["Datacenters"], dcs);
        assert_eq!(job["TaskGroups"][0]["Count"], count);
        assert_eq!(
            task_of(&job)["Config"]["args"],
            json!(["-text", format!("Hello from {env}")])
        );
    }
}

#[test]
fn locals_resolve_chains_in_reverse_order_and_report_cycles() {
    let mut chain = String::from("locals {\n");
    for i in 0..200 {
        chain.push_str(&format!("  l{i} = \"${{local.l{}}}+\"\n", i + 1));
    }
    chain.push_str("  l200 = \"end\"\n}\njob \"x\" {\n  region = local.l0\n}\n");
    let expected = format!("end{}", "+".repeat(200));
    assert_eq!(job(&chain)["Region"], expected);
    let everything =
        job("locals {\n  all = local\n  a = 1\n}\njob \"x\" {\n  meta = { a = local.all.a }\n}\n");
    assert_eq!(everything["Meta"], json!({"a": "1"}));
    let err = error("locals {\n  a = local.b\n  b = local.a\n}\njob \"x\" {\n}\n");
    assert!(err.contains("does not have an attribute named"), "{err}");
    let err = error("locals {\n  a = 1\n}\nlocals {\n  a = 2\n}\njob \"x\" {\n}\n");
    assert!(err.contains("Duplicate value in locals"), "{err}");
}

#[test]
fn variables_block_and_typed_flags() {
    let hcl = r#"
variables {
  region_var = "default_region"
}
variable "dcs" {
  type = list(string)
  default = ["a"]
}
variable "ports" {
  type = map(number)
  default = {}
}
variable "enabled" {
  type = bool
  default = true
}
job "example" {
  region      = var.region_var
  datacenters = var.dcs
  all_at_once = var.enabled
  meta = { for k, v in var.ports : k => v }
}
"#;
    let job = parse(
        hcl,
        "dcs = [\"x\", \"y\"]\n",
        &flags(&[
            ("region_var", "set_region"),
            ("ports", "{ http = 80 }"),
            ("enabled", "false"),
        ]),
    )
    .unwrap();
    assert_eq!(job["Region"], "set_region");
    assert_eq!(job["Datacenters"], json!(["x", "y"]));
    assert_eq!(job["Meta"], json!({"http": "80"}));
    assert_eq!(job["AllAtOnce"], false);
    let json_vars = parse(hcl, r#"{"dcs": ["j"]}"#, &no_flags()).unwrap();
    assert_eq!(json_vars["Datacenters"], json!(["j"]));
}

#[test]
fn variable_validation_passes_and_fails() {
    let hcl = r#"
variable "count" {
  type = number
  default = 2
  validation {
    condition     = var.count > 0 && var.count < 10
    error_message = "Count must be between 1 and 9."
  }
}
job "example" {
  group "g" {
    count = var.count
  }
}
"#;
    assert_eq!(
        parse(hcl, "", &no_flags()).unwrap()["TaskGroups"][0]["Count"],
        2
    );
    let err = parse(hcl, "", &flags(&[("count", "42")])).unwrap_err().0;
    assert!(
        err.contains("Invalid value for cmd variable; Count must be between 1 and 9."),
        "{err}"
    );
    assert!(
        err.contains("This was checked by the validation rule at input.hcl:5,3-"),
        "{err}"
    );
}

#[test]
fn expressions_templates_and_directives() {
    let job = job(r#"
locals {
  names = ["a", "b", "c"]
  objs  = [{ n = 1 }, { n = 2 }]
}
job "example" {
  datacenters = [for s in ["dc1", "dc2"] : upper(s) if s != "dc3"]
  region      = "%{ for n in local.names ~}${n}-%{ endfor ~}end"
  namespace   = "%{ if length(local.names) > 2 }many%{ else }few%{ endif }"
  node_pool   = join(",", local.objs[*].n)
  priority    = (1 + 2) * 10 % 7 + -1
  meta = {
    splat    = jsonencode(local.objs.*.n)
    cond     = true ? "yes" : "no"
    legacy   = local.names.1
    nested   = "${"inner-${local.names[0]}"}"
    escaped  = "$${NOT_INTERPOLATED} %%{ nope }"
    grouped  = jsonencode({ for s in ["ax", "ay", "bz"] : substr(s, 0, 1) => s... })
  }
}
"#);
    assert_eq!(job["Datacenters"], json!(["DC1", "DC2"]));
    assert_eq!(job["Region"], "a-b-c-end");
    assert_eq!(job["Namespace"], "many");
    assert_eq!(job["NodePool"], "1,2");
    assert_eq!(job["Priority"], 1);
    assert_eq!(
        job["Meta"],
        json!({
            "splat": "[1,2]",
            "cond": "yes",
            "legacy": "b",
            "nested": "inner-a",
            "escaped": "${NOT_INTERPOLATED} %{ nope }",
            "grouped": r#"{"a":["ax","ay"],"b":["bz"]}"#
        })
    );
}

// ---------------------------------------------------------------------------------------------
// Errors.

#[test]
fn unknown_argument_is_an_error_naming_it() {
    let err = error(&in_task("      colour = \"red\""));
    assert_eq!(
        err,
        "input.hcl:5,7-13: Unsupported argument; An argument named \"colour\" is not expected here."
    );
    let err = error(&in_task("      drivr = \"exec\""));
    assert!(err.ends_with("Did you mean \"driver\"?"), "{err}");
    let err = error(&in_task("      restart = {}"));
    assert!(
        err.contains("Did you mean to define a block of type \"restart\"?"),
        "{err}"
    );
}

#[test]
fn unknown_block_is_an_error_naming_it() {
    let err = error(&in_task("      widget {\n      }"));
    assert_eq!(
        err,
        "input.hcl:5,7-13: Unsupported block type; Blocks of type \"widget\" are not expected here."
    );
    let err = error(&in_task("      kill_timeout {\n      }"));
    assert!(
        err.contains("Did you mean to define argument \"kill_timeout\"?"),
        "{err}"
    );
    let err = error("resource \"x\" \"y\" {\n}\n");
    assert!(
        err.contains("Blocks of type \"resource\" are not expected here."),
        "{err}"
    );
    let err = error("foo = 1\njob \"x\" {\n}\n");
    assert!(
        err.contains("An argument named \"foo\" is not expected here."),
        "{err}"
    );
}

#[test]
fn missing_and_duplicate_job_blocks_are_errors() {
    assert_eq!(
        error("variable \"x\" {\n  default = 1\n}\n"),
        "<nil>: Missing job block; A job block is required"
    );
    assert_eq!(
        error(""),
        "<nil>: Missing job block; A job block is required"
    );
    let err = error("job \"a\" {\n}\njob \"b\" {\n}\n");
    assert_eq!(
        err,
        "input.hcl:3,1-8: Duplicate job block; Only one block of type \"job\" is allowed. Previous definition was at input.hcl:1,1-8."
    );
}

#[test]
fn missing_and_extra_labels_are_errors() {
    let err = error("job {\n}\n");
    assert!(
        err.contains("Missing name for job; All job blocks must have 1 labels (name)."),
        "{err}"
    );
    let err = error("job \"a\" \"b\" {\n}\n");
    assert!(err.contains("Extraneous label for job"), "{err}");
    let err = error("job \"a\" {\n  group {\n  }\n}\n");
    assert!(err.contains("Missing name for group"), "{err}");
    let err = error("job \"a\" {\n  group \"g\" {\n    task {\n    }\n  }\n}\n");
    assert!(err.contains("Missing name for task"), "{err}");
    let err = error(&in_task("      resources \"big\" {\n      }"));
    assert!(
        err.contains("Extraneous label for resources; No labels are expected"),
        "{err}"
    );
}

#[test]
fn duplicate_single_blocks_and_required_arguments_are_errors() {
    let err = error(&in_task(
        "      resources {\n      }\n      resources {\n      }",
    ));
    assert!(
        err.contains("Duplicate resources block; Only one resources block is allowed. Another was defined at input.hcl:5,7-16."),
        "{err}"
    );
    let err = error(&in_task(
        "      lifecycle {\n        sidecar = true\n      }",
    ));
    assert!(
        err.contains("Missing required argument; The argument \"hook\" is required, but no definition was found."),
        "{err}"
    );
    let err = error(&in_task(
        "      env = {\"a\": \"b\"}\n      env {\n        c = \"d\"\n      }",
    ));
    assert!(err.contains("Duplicate env block"), "{err}");
}

#[test]
fn wrongly_typed_values_are_errors() {
    let err = error("job \"x\" {\n  group \"g\" {\n    count = \"many\"\n  }\n}\n");
    assert!(
        err.contains("Unsuitable value: a number is required"),
        "{err}"
    );
    let err = error("job \"x\" {\n  group \"g\" {\n    count = 1.5\n  }\n}\n");
    assert!(err.contains("value must be a whole number"), "{err}");
    let err = error("job \"x\" {\n  datacenters = \"dc1\"\n}\n");
    assert!(
        err.contains("Unsuitable value: list of string required"),
        "{err}"
    );
    let err = error(&in_task("      kill_timeout = \"5 minutes\""));
    assert!(
        err.contains("Unsuitable duration value: time: unknown unit"),
        "{err}"
    );
    let err = error(&in_task("      env = [\"a\"]"));
    assert!(
        err.contains("Unsuitable value: map of string required"),
        "{err}"
    );
    let err = error("job \"x\" {\n  all_at_once = [1]\n}\n");
    assert!(err.contains("bool required"), "{err}");
    let err = error(&in_task(
        "      scaling \"disk\" {\n        max = 1\n      }",
    ));
    assert!(
        err.contains("scaling policy name must be \"cpu\" or \"mem\""),
        "{err}"
    );
    let err = error("job \"x\" {\n  group \"g\" {\n    scaling {\n      min = 1\n    }\n  }\n}\n");
    assert!(err.contains("The argument \"max\" is required"), "{err}");
}

#[test]
fn unset_and_undeclared_variables_are_errors() {
    let err = error("variable \"region_var\" {}\njob \"x\" {\n  region = var.region_var\n}\n");
    assert!(
        err.starts_with("<nil>: Unset variable \"region_var\"; A used variable must be set"),
        "{err}"
    );

    let hcl = "variable \"a\" {\n  default = 1\n}\njob \"x\" {\n}\n";
    let err = parse(hcl, "b = 2\n", &no_flags()).unwrap_err().0;
    assert!(
        err.contains("Undefined variable; A \"b\" variable was set but was not found"),
        "{err}"
    );
    let err = parse(hcl, "", &flags(&[("c", "3")])).unwrap_err().0;
    assert!(
        err.contains("Undefined -var variable; A \"c\" variable was passed"),
        "{err}"
    );
    let err = parse(hcl, "variable \"a\" {}\n", &no_flags())
        .unwrap_err()
        .0;
    assert!(err.contains("Variable declaration in a .var file"), "{err}");
    let err = parse(hcl, "a = \n", &no_flags()).unwrap_err().0;
    assert!(
        err.starts_with("unable to parse var content: input.hcl:1,"),
        "{err}"
    );
    let err = parse(hcl, "a = NOMAD_ALLOC_ID\n", &no_flags())
        .unwrap_err()
        .0;
    assert!(err.contains("Variables not allowed"), "{err}");

    let err = error("job \"x\" {\n  region = var.nope\n}\n");
    assert!(
        err.contains(
            "Unsupported attribute; This object does not have an attribute named \"nope\"."
        ),
        "{err}"
    );
    let err = error("job \"x\" {\n  region = local.nope\n}\n");
    assert!(err.contains("attribute named \"nope\""), "{err}");
}

#[test]
fn variable_type_mismatches_are_errors() {
    let hcl = "variable \"n\" {\n  type = number\n}\njob \"x\" {\n}\n";
    let err = parse(hcl, "", &flags(&[("n", "abc")])).unwrap_err().0;
    assert!(
        err.contains("Invalid argument value for -var variable"),
        "{err}"
    );
    let err = parse(hcl, "n = \"abc\"\n", &no_flags()).unwrap_err().0;
    assert!(
        err.contains("Invalid value for variable; The value for n is not compatible"),
        "{err}"
    );
    let err =
        error("variable \"l\" {\n  type = list(string)\n  default = \"x\"\n}\njob \"x\" {\n}\n");
    assert!(err.contains("Invalid default value for variable"), "{err}");
    let err = error("variable \"l\" {\n  type = lsit(string)\n}\njob \"x\" {\n}\n");
    assert!(err.contains("Invalid type specification"), "{err}");
    let err = error(
        "variable \"x\" {\n  default = 1\n}\nvariable \"x\" {\n  default = 2\n}\njob \"x\" {\n}\n",
    );
    assert!(
        err.contains("Duplicate variable; Duplicate x variable definition found."),
        "{err}"
    );
    let err = error("variable \"x\" {\n  colour = 1\n}\njob \"x\" {\n}\n");
    assert!(
        err.contains("An argument named \"colour\" is not expected here."),
        "{err}"
    );
}

#[test]
fn filesystem_functions_are_disabled() {
    let err = error("job \"x\" {\n  region = file(\"/etc/passwd\")\n}\n");
    assert_eq!(
        err,
        "input.hcl:2,12-31: Error in function call; Call to function \"file\" failed: filesystem function disabled."
    );
    for f in [
        "filebase64",
        "fileexists",
        "abspath",
        "basename",
        "dirname",
        "pathexpand",
    ] {
        let err = error(&format!("job \"x\" {{\n  region = {f}(\"/etc\")\n}}\n"));
        assert!(err.contains("filesystem function disabled"), "{f}: {err}");
    }
}

#[test]
fn syntax_errors_and_bad_expressions_are_errors() {
    let err = error("job \"x\" {\n  region = \n}\n");
    assert!(err.starts_with("input.hcl:2,"), "{err}");
    assert!(err.contains("Invalid HCL syntax"), "{err}");
    assert!(error("invalid{hcl").contains("Invalid HCL syntax"));
    let err = error("job \"x\" {\n  region = nosuchfn(1)\n}\n");
    assert!(
        err.contains("Call to unknown function; There is no function named \"nosuchfn\"."),
        "{err}"
    );
    let err = error("job \"x\" {\n  region = upper(\"a\", \"b\")\n}\n");
    assert!(err.contains("Too many function arguments"), "{err}");
    let err = error("job \"x\" {\n  priority = 1 / 0\n}\n");
    assert!(err.contains("divide by zero"), "{err}");
    let err = error("job \"x\" {\n  namespace = \"a-${[1]}\"\n}\n");
    assert!(
        err.contains("Cannot include the given value in a string template"),
        "{err}"
    );
    let err = error("job \"x\" {\n  region = \"${[1]}\"\n}\n");
    assert!(err.contains("Unsuitable value: string required"), "{err}");
    let err = error("job \"x\" {\n  priority = [for x in range(2000) : x][0]\n}\n");
    assert!(err.contains("more than 1024 values"), "{err}");
}

#[test]
fn hostile_input_ends_in_an_error_not_a_hang() {
    let err = error(
        "locals {\n  a = range(1000)\n}\njob \"x\" {\n  priority = length([for x in local.a : [for y in local.a : [for z in local.a : 1]]])\n}\n",
    );
    assert!(err.contains("Evaluation too complex"), "{err}");
    let mut chain = String::from("locals {\n  l0 = [1]\n");
    for i in 1..400 {
        chain.push_str(&format!("  l{i} = [[[[local.l{}]]]]\n", i - 1));
    }
    chain.push_str("}\njob \"x\" {\n}\n");
    assert!(error(&chain).contains("nested too deeply"));
    let deep = format!(
        "job \"x\" {{\n  region = {}1{}\n}}\n",
        "[".repeat(500),
        "]".repeat(500)
    );
    assert!(parse(&deep, "", &no_flags()).is_err());
}

#[test]
fn truncated_and_mangled_inputs_never_panic() {
    for source in [SERVICE, BATCH_PERIODIC, CONSTRAINTS, CONNECT, SYSTEM] {
        let mut cut = 0;
        while cut < source.len() {
            if source.is_char_boundary(cut) {
                let _ = parse(&source[..cut], SERVICE_VARS, &flags(&[("count", "2")]));
            }
            cut += 7;
        }
        let mangled = source.replace('"', "").replace('}', "]");
        let _ = parse(&mangled, "", &no_flags());
    }
}

// ---------------------------------------------------------------------------------------------
// Functions.

#[test]
fn numeric_functions() {
    assert_eq!(value("abs(-3.5)"), json!(3.5));
    assert_eq!(value("ceil(1.2)"), json!(2));
    assert_eq!(value("floor(-1.2)"), json!(-2));
    assert_eq!(value("log(16, 2)"), json!(4));
    assert_eq!(value("max(1, 9, 3)"), json!(9));
    assert_eq!(value("min([4, 2, 8]...)"), json!(2));
    assert_eq!(value("pow(2, 10)"), json!(1024));
    assert_eq!(value("signum(-7)"), json!(-1));
    assert_eq!(value("parseint(\"ff\", 16)"), json!(255));
    assert_eq!(value("parseint(\"-101\", 2)"), json!(-5));
    assert!(eval_expr("parseint(\"12\", 2)").is_err());
}

#[test]
fn string_functions() {
    assert_eq!(value("chomp(\"hello\\n\\n\")"), json!("hello"));
    assert_eq!(
        value("format(\"%s-%03d-%.2f-%t-%q\", \"a\", 7, 3.14159, true, \"x\")"),
        json!("a-007-3.14-true-\"x\"")
    );
    assert_eq!(
        value("format(\"%v %5s|%-4s|\", [1], \"ab\", \"c\")"),
        json!("[1]    ab|c   |")
    );
    assert_eq!(
        value("format(\"%x %X %b %o %%\", 255, 255, 5, 8)"),
        json!("ff FF 101 10 %")
    );
    assert_eq!(value("format(\"%e\", 1234.5678)"), json!("1.234568e+03"));
    assert!(eval_expr("format(\"%s %s\", \"a\")").is_err());
    assert_eq!(
        value("formatlist(\"%s=%s\", [\"a\", \"b\"], \"x\")"),
        json!(["a=x", "b=x"])
    );
    assert_eq!(value("indent(2, \"a\\nb\")"), json!("a\n  b"));
    assert_eq!(
        value("join(\"-\", [\"a\", \"b\"], [\"c\"])"),
        json!("a-b-c")
    );
    assert_eq!(value("lower(\"ABC\")"), json!("abc"));
    assert_eq!(value("upper(\"abc\")"), json!("ABC"));
    assert_eq!(
        value("title(\"hello big-world\")"),
        json!("Hello Big-World")
    );
    assert_eq!(value("trimspace(\"  x \\n\")"), json!("x"));
    assert_eq!(value("trim(\"?!hello?!\", \"!?\")"), json!("hello"));
    assert_eq!(
        value("trimprefix(\"helloworld\", \"hello\")"),
        json!("world")
    );
    assert_eq!(
        value("trimsuffix(\"helloworld\", \"world\")"),
        json!("hello")
    );
    assert_eq!(
        value("split(\",\", \"a,b,,c\")"),
        json!(["a", "b", "", "c"])
    );
    assert_eq!(
        value("replace(\"1 + 2 + 3\", \"+\", \"-\")"),
        json!("1 - 2 - 3")
    );
    assert_eq!(
        value("regex_replace(\"a1b22\", \"[0-9]+\", \"#\")"),
        json!("a#b#")
    );
    assert_eq!(value("regex(\"[a-z]+\", \"53abc12\")"), json!("abc"));
    assert_eq!(
        value("regex(\"(\\\\d+)-(\\\\d+)\", \"10-20\")"),
        json!(["10", "20"])
    );
    assert_eq!(
        value("regex(\"(?P<major>\\\\d+)\\\\.(?P<minor>\\\\d+)\", \"v1.25\")"),
        json!({"major": "1", "minor": "25"})
    );
    assert_eq!(
        value("regexall(\"[a-z]+\", \"ab1cd2\")"),
        json!(["ab", "cd"])
    );
    assert!(eval_expr("regex(\"x\", \"abc\")").is_err());
    assert_eq!(value("substr(\"hello world\", 1, 4)"), json!("ello"));
    assert_eq!(value("substr(\"hello\", -3, -1)"), json!("llo"));
    assert_eq!(value("strrev(\"abc\")"), json!("cba"));
    assert_eq!(value("strlen(\"héllo\")"), json!(5));
}

#[test]
fn collection_functions() {
    assert_eq!(value("coalesce(null, \"\", \"b\")"), json!(""));
    assert_eq!(value("coalesce(null, \"a\")"), json!("a"));
    assert_eq!(value("coalescelist([], [\"x\"])"), json!(["x"]));
    assert_eq!(
        value("compact([\"a\", \"\", null, \"b\"])"),
        json!(["a", "b"])
    );
    assert_eq!(value("concat([1], [2, 3])"), json!([1, 2, 3]));
    assert_eq!(value("contains([\"a\", \"b\"], \"b\")"), json!(true));
    assert_eq!(value("distinct([1, 2, 1, 3])"), json!([1, 2, 3]));
    assert_eq!(value("element([\"a\", \"b\"], 3)"), json!("b"));
    assert_eq!(value("flatten([[1], [[2, 3]], 4])"), json!([1, 2, 3, 4]));
    assert_eq!(value("index([\"a\", \"b\"], \"b\")"), json!(1));
    assert_eq!(value("keys({b = 1, a = 2})"), json!(["a", "b"]));
    assert_eq!(value("values({b = 1, a = 2})"), json!([2, 1]));
    assert_eq!(value("length({a = 1})"), json!(1));
    assert_eq!(value("length(\"abc\")"), json!(3));
    assert_eq!(value("lookup({a = 1}, \"b\", 7)"), json!(7));
    assert!(eval_expr("lookup({a = 1}, \"b\")").is_err());
    assert_eq!(
        value("merge({a = 1}, {b = 2}, {a = 3})"),
        json!({"a": 3, "b": 2})
    );
    assert_eq!(value("range(3)"), json!([0, 1, 2]));
    assert_eq!(value("range(1, 8, 3)"), json!([1, 4, 7]));
    assert_eq!(value("range(3, 0)"), json!([3, 2, 1]));
    assert_eq!(value("reverse([1, 2])"), json!([2, 1]));
    assert_eq!(
        value("slice([\"a\", \"b\", \"c\"], 1, 3)"),
        json!(["b", "c"])
    );
    assert_eq!(value("sort([\"b\", \"a\", \"c\"])"), json!(["a", "b", "c"]));
    assert_eq!(
        value("zipmap([\"a\", \"b\"], [1, 2])"),
        json!({"a": 1, "b": 2})
    );
    assert_eq!(value("chunklist([1, 2, 3], 2)"), json!([[1, 2], [3]]));
    assert_eq!(
        value("setunion([\"b\"], [\"a\", \"b\"])"),
        json!(["a", "b"])
    );
    assert_eq!(
        value("setintersection([\"a\", \"b\"], [\"b\", \"c\"])"),
        json!(["b"])
    );
    assert_eq!(
        value("setproduct([\"a\"], [1, 2])"),
        json!([["a", 1], ["a", 2]])
    );
}

#[test]
fn conversion_and_encoding_functions() {
    assert_eq!(value("tobool(\"true\")"), json!(true));
    assert_eq!(value("tonumber(\"42\")"), json!(42));
    assert_eq!(value("tostring(5)"), json!("5"));
    assert_eq!(value("tolist([1, 2])"), json!([1, 2]));
    assert_eq!(value("toset([\"b\", \"a\", \"b\"])"), json!(["a", "b"]));
    assert_eq!(value("tomap({a = 1})"), json!({"a": 1}));
    assert!(eval_expr("tonumber(\"x\")").is_err());
    assert!(eval_expr("tostring([1])").is_err());
    assert_eq!(value("convert(\"5\", number)"), json!(5));
    assert_eq!(
        value("jsonencode({a = [1, \"<b>\"], c = null})"),
        json!(r#"{"a":[1,"\u003cb\u003e"],"c":null}"#)
    );
    assert_eq!(
        value("jsondecode(\"{\\\"a\\\": [1, true]}\")"),
        json!({"a": [1, true]})
    );
    assert_eq!(value("base64encode(\"hello\")"), json!("aGVsbG8="));
    assert_eq!(value("base64decode(\"aGVsbG8=\")"), json!("hello"));
    assert!(eval_expr("base64decode(\"%%\")").is_err());
    assert_eq!(
        value("urlencode(\"a b&c=d/é\")"),
        json!("a+b%26c%3Dd%2F%C3%A9")
    );
    assert_eq!(
        value("csvdecode(\"a,b\\n1,\\\"x,y\\\"\\n\")"),
        json!([{"a": "1", "b": "x,y"}])
    );
    assert_eq!(
        value("sha256(\"abc\")"),
        json!("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    );
    assert_eq!(
        value("md5(\"abc\")"),
        json!("900150983cd24fb0d6963f7d28e17f72")
    );
    assert_eq!(
        value("uuidv5(\"dns\", \"www.example.com\")"),
        json!("2ed6657d-e927-568b-95e1-2665a8aea6a2")
    );
    let uuid = value("uuidv4()");
    assert_eq!(uuid.as_str().map(str::len), Some(36));
    assert_eq!(
        value("try(tonumber(\"x\"), \"fallback\")"),
        json!("fallback")
    );
    assert_eq!(value("can(tonumber(\"x\"))"), json!(false));
}

#[test]
fn network_and_time_functions() {
    assert_eq!(
        value("cidrhost(\"10.12.112.0/20\", 16)"),
        json!("10.12.112.16")
    );
    assert_eq!(
        value("cidrhost(\"10.12.112.0/20\", -1)"),
        json!("10.12.127.255")
    );
    assert_eq!(
        value("cidrnetmask(\"172.16.0.0/12\")"),
        json!("255.240.0.0")
    );
    assert_eq!(
        value("cidrsubnet(\"10.1.2.0/24\", 4, 15)"),
        json!("10.1.2.240/28")
    );
    assert_eq!(
        value("cidrsubnet(\"fd00:fd12:3456:7890::/56\", 16, 162)"),
        json!("fd00:fd12:3456:7800:a200::/72")
    );
    assert_eq!(
        value("cidrsubnets(\"10.1.0.0/16\", 4, 4, 8, 4)"),
        json!([
            "10.1.0.0/20",
            "10.1.16.0/20",
            "10.1.32.0/24",
            "10.1.48.0/20"
        ])
    );
    assert_eq!(
        value("formatdate(\"YYYY-MM-DD\", \"2024-02-29T10:00:00Z\")"),
        json!("2024-02-29")
    );
    assert_eq!(
        value("timeadd(\"2024-02-28T23:00:00Z\", \"2h\")"),
        json!("2024-02-29T01:00:00Z")
    );
}

// ---------------------------------------------------------------------------------------------
// Canonicalize.

fn canonical(mut job: Json) -> Json {
    canonicalize(&mut job);
    job
}

#[test]
fn canonicalize_fills_job_defaults_for_service_jobs() {
    let job = canonical(job(
        "job \"web\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"docker\"\n    }\n  }\n}\n",
    ));
    for (key, expected) in [
        ("ID", json!("web")),
        ("Name", json!("web")),
        ("ParentID", json!("")),
        ("Namespace", json!("default")),
        ("Priority", json!(50)),
        ("Stop", json!(false)),
        ("Region", json!("global")),
        ("NodePool", json!("")),
        ("Type", json!("service")),
        ("AllAtOnce", json!(false)),
        ("Status", json!("")),
        ("StatusDescription", json!("")),
        ("Stable", json!(false)),
        ("Version", json!(0)),
        ("CreateIndex", json!(0)),
        ("ModifyIndex", json!(0)),
        ("JobModifyIndex", json!(0)),
    ] {
        assert_eq!(job[key], expected, "{key}");
    }
    assert!(
        job.get("Datacenters").is_none(),
        "Datacenters is not filled"
    );
    let update = json!({
        "Stagger": 30_000_000_000_i64,
        "MaxParallel": 1,
        "HealthCheck": "checks",
        "MinHealthyTime": 10_000_000_000_i64,
        "HealthyDeadline": 300_000_000_000_i64,
        "ProgressDeadline": 600_000_000_000_i64,
        "AutoRevert": false,
        "Canary": 0,
        "AutoPromote": false
    });
    assert_eq!(job["Update"], update);
    let group = &job["TaskGroups"][0];
    assert_eq!(group["Count"], 1);
    assert_eq!(
        group["Update"], update,
        "the job's update reaches the group"
    );
    assert_eq!(
        group["EphemeralDisk"],
        json!({"Sticky": false, "Migrate": false, "SizeMB": 300})
    );
    assert_eq!(
        group["ReschedulePolicy"],
        json!({"Attempts": 0, "Interval": 0, "Delay": 30_000_000_000_i64, "DelayFunction": "exponential", "MaxDelay": 3_600_000_000_000_i64, "Unlimited": true})
    );
    assert_eq!(
        group["Migrate"],
        json!({"MaxParallel": 1, "HealthCheck": "checks", "MinHealthyTime": 10_000_000_000_i64, "HealthyDeadline": 300_000_000_000_i64})
    );
    let restart = json!({"Attempts": 2, "Interval": 1_800_000_000_000_i64, "Delay": 15_000_000_000_i64, "Mode": "fail", "RenderTemplates": false});
    assert_eq!(group["RestartPolicy"], restart);
    let task = &group["Tasks"][0];
    assert_eq!(
        task["Resources"],
        json!({"CPU": 100, "Cores": 0, "MemoryMB": 300})
    );
    assert_eq!(task["KillTimeout"], 5_000_000_000_i64);
    assert_eq!(
        task["LogConfig"],
        json!({"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": false})
    );
    assert_eq!(task["RestartPolicy"], restart);
}

#[test]
fn register_canonicalization_is_the_full_one_minus_job_level_zero_defaults() {
    let jobs = [
        parse(SERVICE, SERVICE_VARS, &flags(&[("count", "3")])),
        parse(BATCH_PERIODIC, "", &no_flags()),
        parse(PARAMETERIZED, "", &no_flags()),
        parse(CONSTRAINTS, "", &no_flags()),
        parse(CONNECT, "", &no_flags()),
        parse(SYSTEM, "", &no_flags()),
    ];
    for job in jobs {
        let job = job.unwrap();
        let mut sparse = job.clone();
        canonicalize_for_register(&mut sparse);
        let full = canonical(job);
        for key in [
            "ParentID",
            "Stop",
            "AllAtOnce",
            "ConsulNamespace",
            "Version",
        ] {
            assert!(sparse.get(key).is_none(), "{key} left out");
        }
        assert_eq!(
            canonical(sparse),
            full,
            "the full pass fills only what was left out"
        );
    }
}

#[test]
fn canonicalize_fills_batch_defaults() {
    let job = canonical(parse(BATCH_PERIODIC, "", &no_flags()).unwrap());
    assert!(
        job.get("Update").is_none(),
        "batch jobs get no update strategy"
    );
    let group = &job["TaskGroups"][0];
    assert!(group.get("Migrate").is_none());
    assert!(group.get("Update").is_none());
    assert_eq!(
        group["ReschedulePolicy"],
        json!({"Attempts": 2, "Interval": 3_600_000_000_000_i64, "Delay": 5_000_000_000_i64, "DelayFunction": "constant", "MaxDelay": 0, "Unlimited": false}),
        "job reschedule over the batch default"
    );
    assert_eq!(
        group["RestartPolicy"],
        json!({"Attempts": 1, "Interval": 86_400_000_000_000_i64, "Delay": 15_000_000_000_i64, "Mode": "fail", "RenderTemplates": false})
    );
    assert_eq!(
        job["Periodic"],
        json!({"Enabled": true, "Spec": "", "Specs": ["0 */6 * * *", "30 1 * * *"], "SpecType": "cron", "ProhibitOverlap": true, "TimeZone": "Europe/Paris"})
    );
    let task = &group["Tasks"][0];
    assert_eq!(
        task["Resources"],
        json!({"CPU": 0, "Cores": 2, "MemoryMB": 1024}),
        "cores means no CPU default"
    );

    let plain = canonical(job_of_type("batch"));
    assert_eq!(
        plain["TaskGroups"][0]["ReschedulePolicy"],
        json!({"Attempts": 1, "Interval": 86_400_000_000_000_i64, "Delay": 5_000_000_000_i64, "DelayFunction": "constant", "MaxDelay": 0, "Unlimited": false})
    );
}

fn job_of_type(job_type: &str) -> Json {
    job(&format!(
        "job \"j\" {{\n  type = \"{job_type}\"\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n    }}\n  }}\n}}\n"
    ))
}

#[test]
fn canonicalize_fills_system_and_sysbatch_defaults() {
    let system = canonical(job_of_type("system"));
    assert!(system.get("Update").is_some());
    let group = &system["TaskGroups"][0];
    assert!(
        group.get("ReschedulePolicy").is_none(),
        "system jobs do not reschedule"
    );
    assert!(group.get("Migrate").is_none());
    assert_eq!(group["RestartPolicy"]["Attempts"], 2);
    assert_eq!(group["RestartPolicy"]["Interval"], 1_800_000_000_000_i64);

    let sysbatch = canonical(job_of_type("sysbatch"));
    assert!(sysbatch.get("Update").is_none());
    let group = &sysbatch["TaskGroups"][0];
    assert!(group.get("ReschedulePolicy").is_none());
    assert_eq!(group["RestartPolicy"]["Attempts"], 3);
    assert_eq!(group["RestartPolicy"]["Interval"], 86_400_000_000_000_i64);
}

#[test]
fn canonicalize_merges_job_group_and_task_policies() {
    let job = canonical(job(r#"job "m" {
  update {
    max_parallel = 3
  }
  reschedule {
    delay = "1m"
  }
  group "g" {
    update {
      canary = 2
    }
    reschedule {
      attempts = 4
    }
    restart {
      attempts = 9
    }
    scaling {
      min = 4
      max = 10
    }
    task "t" {
      driver = "exec"
      restart {
        delay = "1s"
      }
      lifecycle {
        hook = ""
      }
      artifact {
        source = "https://x/y/tool.bin"
        mode   = "file"
      }
      artifact {
        source = "git::https://x/repo"
      }
    }
  }
}
"#));
    let group = &job["TaskGroups"][0];
    assert_eq!(group["Count"], 4, "count from scaling.min");
    assert_eq!(group["Scaling"]["Enabled"], true);
    assert_eq!(group["Update"]["MaxParallel"], 3);
    assert_eq!(group["Update"]["Canary"], 2);
    assert_eq!(group["Update"]["Stagger"], 30_000_000_000_i64);
    assert_eq!(group["ReschedulePolicy"]["Delay"], 60_000_000_000_i64);
    assert_eq!(group["ReschedulePolicy"]["Attempts"], 4);
    assert_eq!(group["ReschedulePolicy"]["DelayFunction"], "exponential");
    assert_eq!(group["RestartPolicy"]["Attempts"], 9);
    let task = &group["Tasks"][0];
    assert_eq!(
        task["RestartPolicy"]["Attempts"], 9,
        "group restart under the task's"
    );
    assert_eq!(task["RestartPolicy"]["Delay"], 1_000_000_000_i64);
    assert!(
        task.get("Lifecycle").is_none(),
        "a lifecycle without hook is dropped"
    );
    assert_eq!(task["Artifacts"][0]["RelativeDest"], "local/tool.bin");
    assert_eq!(task["Artifacts"][1]["RelativeDest"], "local/");
    assert_eq!(task["Artifacts"][1]["GetterMode"], "any");
}

#[test]
fn canonicalize_fills_service_template_and_vault_defaults() {
    let job = canonical(service_job());
    let service = &job["TaskGroups"][0]["Services"][0];
    assert_eq!(service["AddressMode"], "auto");
    assert_eq!(service["OnUpdate"], "require_healthy");
    assert_eq!(service["Provider"], "nomad");
    assert_eq!(service["Checks"][0]["OnUpdate"], "require_healthy");
    let unnamed = canonical(self::job(
        "job \"j\" {\n  group \"g\" {\n    service {\n      port = \"http\"\n    }\n    task \"t\" {\n      driver = \"exec\"\n      service {\n        port = \"x\"\n      }\n      vault {\n        policies = [\"p\"]\n      }\n    }\n  }\n}\n",
    ));
    assert_eq!(unnamed["TaskGroups"][0]["Services"][0]["Name"], "j-g");
    assert_eq!(
        unnamed["TaskGroups"][0]["Services"][0]["Provider"],
        "consul"
    );
    let task = &unnamed["TaskGroups"][0]["Tasks"][0];
    assert_eq!(task["Services"][0]["Name"], "j-g-t");
    assert_eq!(
        task["Vault"],
        json!({"Policies": ["p"], "Env": true, "DisableFile": false, "ChangeMode": "restart", "Namespace": "", "Cluster": "default", "ChangeSignal": "SIGHUP", "AllowTokenExpiration": false})
    );
    let template = &canonical(service_job())["TaskGroups"][0]["Tasks"][0]["Templates"][1];
    assert_eq!(template["SourcePath"], "");
    assert_eq!(template["ChangeSignal"], "");
    assert_eq!(template["LeftDelim"], "{{");
    assert_eq!(template["RightDelim"], "}}");
    assert_eq!(template["Once"], false);
    assert_eq!(template["VaultGrace"], 0);
}

#[test]
fn canonicalize_is_idempotent() {
    for source in [
        SERVICE,
        BATCH_PERIODIC,
        PARAMETERIZED,
        CONSTRAINTS,
        CONNECT,
        SYSTEM,
    ] {
        let parsed = parse(source, SERVICE_VARS, &flags(&[("count", "2")]))
            .unwrap_or_else(|_| parse(source, "", &no_flags()).unwrap());
        let once = canonical(parsed);
        let twice = canonical(once.clone());
        assert_eq!(once, twice);
    }
}

#[test]
fn canonicalize_treats_null_as_unset_and_leaves_wrong_types_alone() {
    let mut job = json!({
        "ID": "x",
        "Name": null,
        "Priority": "high",
        "Constraints": null,
        "Update": null,
        "TaskGroups": [
            {"Name": "g", "Count": null, "Tasks": [{"Name": "t", "Resources": null, "Lifecycle": {}, "Env": null}]},
            "not a group",
            null
        ]
    });
    canonicalize(&mut job);
    assert_eq!(job["Name"], "x");
    assert_eq!(
        job["Priority"], "high",
        "wrong types are left for deserialization to reject"
    );
    assert!(job.get("Constraints").is_none());
    assert_eq!(job["Update"]["MaxParallel"], 1);
    assert_eq!(job["TaskGroups"][0]["Count"], 1);
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Resources"]["CPU"], 100);
    assert!(job["TaskGroups"][0]["Tasks"][0].get("Lifecycle").is_none());
    assert!(job["TaskGroups"][0]["Tasks"][0].get("Env").is_none());
    assert_eq!(job["TaskGroups"][1], "not a group");

    for weird in [
        json!(null),
        json!(3),
        json!("job"),
        json!([1, 2]),
        json!({"TaskGroups": 5}),
        json!({"TaskGroups": [{"Tasks": "x", "Scaling": [], "EphemeralDisk": 1, "Services": [1]}]}),
        json!({"Type": 7, "Periodic": 1, "Update": "x", "Multiregion": {"Regions": [1, {"Count": null}]}}),
    ] {
        let mut value = weird.clone();
        canonicalize(&mut value);
        let again = value.clone();
        canonicalize(&mut value);
        assert_eq!(value, again);
    }
}

#[test]
fn canonicalized_jobs_deserialize_into_typed_structs() {
    for source in [SERVICE, PARAMETERIZED, CONSTRAINTS, CONNECT, SYSTEM] {
        let parsed = parse(source, SERVICE_VARS, &flags(&[("count", "2")]))
            .unwrap_or_else(|_| parse(source, "", &no_flags()).unwrap());
        let job = canonical(parsed);
        let typed: Result<scheduler_structs::Job, _> = serde_json::from_value(job.clone());
        assert!(typed.is_ok(), "{:?}\n{job:#}", typed.err());
    }
}

#[test]
fn group_vault_and_secrets_reach_their_tasks() {
    let job = job(r#"job "v" {
  secret "shared" {
    provider = "vault"
    path     = "kv/shared"
  }
  group "g" {
    vault {
      role = "group-role"
      change_mode = "noop"
    }
    secret "db" {
      provider = "vault"
      path     = "kv/db"
      env {
        PASSWORD = "password"
      }
    }
    task "a" {
      driver = "exec"
    }
    task "b" {
      driver = "exec"
      vault {
        role = "own"
      }
      secret "own" {
        path = "kv/own"
      }
    }
  }
}
"#);
    let tasks = &job["TaskGroups"][0]["Tasks"];
    assert_eq!(
        tasks[0]["Vault"],
        json!({"Role": "group-role", "ChangeMode": "noop", "Env": true, "DisableFile": false})
    );
    assert_eq!(tasks[1]["Vault"]["Role"], "own");
    let names = |task: &Json| -> Vec<String> {
        task["Secrets"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|x| x["Name"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(names(&tasks[0]), ["db", "shared"]);
    assert_eq!(names(&tasks[1]), ["own", "db", "shared"]);
    assert_eq!(
        tasks[0]["Secrets"][0]["Env"],
        json!({"PASSWORD": "password"})
    );
    assert!(job.get("__vault").is_none() && job["TaskGroups"][0].get("__secrets").is_none());
}

/// The conformance suite's parse case (conformance/test_scheduler.py).
#[test]
fn conformance_parse_case_round_trips_into_a_registrable_job() {
    let hcl = r#"
variable "greeting" {
  type    = string
  default = "hello"
}

job "conf-parse" {
  datacenters = ["dc1"]

  meta {
    greeting = "${var.greeting}-world"
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["300", "${var.greeting}"]
      }
    }
  }
}
"#;
    let parsed = job(hcl);
    assert_eq!(parsed["Meta"], json!({"greeting": "hello-world"}));
    assert_eq!(
        task_of(&parsed)["Config"],
        json!({"command": "/bin/sleep", "args": ["300", "hello"]})
    );
    assert!(parsed.get("Priority").is_none() && parsed.get("Region").is_none());
    assert!(parsed["TaskGroups"][0].get("Count").is_none());
    let canonical = canonical(parsed);
    assert_eq!(canonical["TaskGroups"][0]["RestartPolicy"]["Mode"], "fail");
    let typed: scheduler_structs::Job = serde_json::from_value(canonical).unwrap();
    assert_eq!(typed.task_groups[0].count, 1);
    assert_eq!(typed.task_groups[0].tasks[0].resources.cpu, 100);
    assert_eq!(typed.task_groups[0].tasks[0].kill_timeout, 5_000_000_000);
    assert!(error("job \"broken\" {\n  group \"g\" {\n").contains("Invalid HCL syntax"));
    assert!(error("job \"unset\" {\n  datacenters = [var.nope]\n}\n").contains("\"nope\""));
}

#[test]
fn windows_line_endings_parse_like_unix_ones() {
    let crlf = SERVICE.replace('\n', "\r\n");
    let vars = SERVICE_VARS.replace('\n', "\r\n");
    let job = parse(&crlf, &vars, &flags(&[("count", "3")])).unwrap();
    assert_eq!(job["TaskGroups"][0]["Count"], 6);
    assert_eq!(
        task_of(&job)["Env"],
        service_job()["TaskGroups"][0]["Tasks"][0]["Env"]
    );
}
