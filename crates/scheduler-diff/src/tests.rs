//! Tests of the job diff, named after behaviour; expected outputs follow upstream's
//! `nomad/structs/diff_test.go`.

use serde_json::{Value, json};

use super::*;

/// A canonical-looking task.
fn base_task() -> Value {
    json!({
        "Name": "server",
        "Driver": "docker",
        "User": "",
        "Config": {"image": "nginx:1.25", "args": ["-g", "daemon off;"]},
        "Env": {"PORT": "8080"},
        "Services": [],
        "Templates": [],
        "Constraints": [],
        "Resources": {"CPU": 100, "MemoryMB": 300, "Networks": [], "Devices": []},
        "Meta": {},
        "KillTimeout": 5_000_000_000_i64,
        "KillSignal": "",
        "Leader": false,
        "LogConfig": {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": false},
        "Artifacts": []
    })
}

/// A canonical-looking group with [`base_task`].
fn base_group() -> Value {
    json!({
        "Name": "frontend",
        "Count": 1,
        "Constraints": [],
        "RestartPolicy": {
            "Attempts": 2,
            "Interval": 1_800_000_000_000_i64,
            "Delay": 15_000_000_000_i64,
            "Mode": "fail",
            "RenderTemplates": false
        },
        "EphemeralDisk": {"Sticky": false, "SizeMB": 300, "Migrate": false},
        "Networks": [],
        "Services": [],
        "Meta": {},
        "ShutdownDelay": null,
        "Tasks": [base_task()]
    })
}

/// A canonical-looking job with [`base_group`].
fn base_job() -> Value {
    json!({
        "Region": "global",
        "Namespace": "default",
        "ID": "web",
        "ParentID": "",
        "Name": "web",
        "Type": "service",
        "Priority": 50,
        "AllAtOnce": false,
        "Datacenters": ["dc1"],
        "NodePool": "default",
        "Constraints": [],
        "Affinities": [],
        "Spreads": [],
        "Update": {"Stagger": 30_000_000_000_i64, "MaxParallel": 1},
        "Periodic": null,
        "ParameterizedJob": null,
        "Meta": {"owner": "ops"},
        "Stable": false,
        "Stop": false,
        "SubmitTime": 1_700_000_000_000_000_000_i64,
        "Status": "running",
        "StatusDescription": "",
        "Version": 0,
        "CreateIndex": 10,
        "ModifyIndex": 10,
        "JobModifyIndex": 10,
        "TaskGroups": [base_group()]
    })
}

fn group_mut(job: &mut Value, index: usize) -> &mut Value {
    &mut job["TaskGroups"][index]
}

fn task_mut(job: &mut Value, group: usize, task: usize) -> &mut Value {
    &mut job["TaskGroups"][group]["Tasks"][task]
}

fn field(diff_type: DiffType, name: &str, old: &str, new: &str) -> FieldDiff {
    FieldDiff {
        diff_type,
        name: name.to_owned(),
        old: old.to_owned(),
        new: new.to_owned(),
        annotations: None,
    }
}

fn object<'a>(objects: &'a [ObjectDiff], name: &str) -> &'a ObjectDiff {
    objects
        .iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no object {name} in {objects:#?}"))
}

#[test]
fn identical_jobs_have_no_diff() {
    let diff = job_diff(&base_job(), &base_job(), false);
    assert_eq!(diff.diff_type, DiffType::None);
    assert_eq!(diff.id, "web");
    assert!(diff.fields.is_empty());
    assert!(diff.objects.is_empty());
    // Upstream still lists every group and task, typed None.
    assert_eq!(diff.task_groups.len(), 1);
    let group = &diff.task_groups[0];
    assert_eq!(
        (group.diff_type, group.name.as_str()),
        (DiffType::None, "frontend")
    );
    assert!(group.fields.is_empty() && group.objects.is_empty());
    assert_eq!(group.tasks.len(), 1);
    assert_eq!(group.tasks[0].diff_type, DiffType::None);
    assert!(group.tasks[0].fields.is_empty() && group.tasks[0].objects.is_empty());
}

#[test]
fn identical_jobs_contextual_are_still_none() {
    let diff = job_diff(&base_job(), &base_job(), true);
    assert_eq!(diff.diff_type, DiffType::None);
    assert!(diff.fields.is_empty());
    assert!(diff.objects.is_empty());
}

#[test]
fn group_count_change_is_an_edited_field() {
    let old = base_job();
    let mut new = base_job();
    group_mut(&mut new, 0)["Count"] = json!(3);
    let diff = job_diff(&old, &new, true);
    assert_eq!(diff.diff_type, DiffType::Edited);
    assert!(diff.fields.is_empty());
    let group = &diff.task_groups[0];
    assert_eq!(group.diff_type, DiffType::Edited);
    assert_eq!(
        group.fields,
        vec![field(DiffType::Edited, "Count", "1", "3")]
    );
    assert!(group.objects.is_empty());
    assert_eq!(group.tasks[0].diff_type, DiffType::None);
}

#[test]
fn meta_keys_added_edited_and_deleted() {
    let mut old = base_job();
    old["Meta"] = json!({"owner": "ops", "tier": "web", "gone": "x"});
    let mut new = base_job();
    new["Meta"] = json!({"owner": "sre", "tier": "web", "team": "blue"});
    let diff = job_diff(&old, &new, false);
    assert_eq!(diff.diff_type, DiffType::Edited);
    assert_eq!(
        diff.fields,
        vec![
            field(DiffType::Deleted, "Meta[gone]", "x", ""),
            field(DiffType::Edited, "Meta[owner]", "ops", "sre"),
            field(DiffType::Added, "Meta[team]", "", "blue"),
        ]
    );
}

#[test]
fn datacenter_added_is_a_set_diff() {
    let old = base_job();
    let mut new = base_job();
    new["Datacenters"] = json!(["dc1", "dc2"]);

    let diff = job_diff(&old, &new, false);
    assert_eq!(diff.diff_type, DiffType::Edited);
    let dcs = object(&diff.objects, "Datacenters");
    assert_eq!(dcs.diff_type, DiffType::Added);
    assert_eq!(
        dcs.fields,
        vec![field(DiffType::Added, "Datacenters", "", "dc2")]
    );

    // Contextual: the kept member is listed as None, added ones sort first.
    let diff = job_diff(&old, &new, true);
    let dcs = object(&diff.objects, "Datacenters");
    assert_eq!(
        dcs.fields,
        vec![
            field(DiffType::Added, "Datacenters", "", "dc2"),
            field(DiffType::None, "Datacenters", "dc1", "dc1"),
        ]
    );
}

#[test]
fn datacenter_reorder_is_no_diff() {
    let mut old = base_job();
    old["Datacenters"] = json!(["dc1", "dc2"]);
    let mut new = base_job();
    new["Datacenters"] = json!(["dc2", "dc1"]);
    let diff = job_diff(&old, &new, true);
    assert_eq!(diff.diff_type, DiffType::None);
    assert!(diff.objects.is_empty());
}

#[test]
fn constraint_added_is_an_added_object() {
    let old = base_job();
    let mut new = base_job();
    new["Constraints"] =
        json!([{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}]);
    let diff = job_diff(&old, &new, false);
    assert_eq!(diff.diff_type, DiffType::Edited);
    assert_eq!(
        diff.objects,
        vec![ObjectDiff {
            diff_type: DiffType::Added,
            name: "Constraint".to_owned(),
            fields: vec![
                field(DiffType::Added, "LTarget", "", "${attr.kernel.name}"),
                field(DiffType::Added, "Operand", "", "="),
                field(DiffType::Added, "RTarget", "", "linux"),
            ],
            objects: vec![],
        }]
    );
}

#[test]
fn constraint_change_is_delete_plus_add_not_edit() {
    let mut old = base_job();
    group_mut(&mut old, 0)["Constraints"] =
        json!([{"LTarget": "a", "RTarget": "1", "Operand": "="}]);
    let mut new = base_job();
    group_mut(&mut new, 0)["Constraints"] =
        json!([{"LTarget": "a", "RTarget": "2", "Operand": "="}]);
    let diff = job_diff(&old, &new, false);
    let group = &diff.task_groups[0];
    let types: Vec<(&str, DiffType)> = group
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.diff_type))
        .collect();
    assert_eq!(
        types,
        vec![
            ("Constraint", DiffType::Added),
            ("Constraint", DiffType::Deleted)
        ]
    );
}

#[test]
fn task_env_and_config_changes() {
    let old = base_job();
    let mut new = base_job();
    task_mut(&mut new, 0, 0)["Env"] = json!({"PORT": "9090", "MODE": "prod"});
    task_mut(&mut new, 0, 0)["Config"] =
        json!({"image": "nginx:1.27", "args": ["-g", "daemon off;"], "ports": ["http"]});
    let diff = job_diff(&old, &new, true);
    assert_eq!(diff.diff_type, DiffType::Edited);
    let task = &diff.task_groups[0].tasks[0];
    assert_eq!(
        (task.diff_type, task.name.as_str()),
        (DiffType::Edited, "server")
    );
    assert_eq!(
        task.fields,
        vec![
            field(DiffType::Added, "Env[MODE]", "", "prod"),
            field(DiffType::Edited, "Env[PORT]", "8080", "9090"),
        ]
    );
    assert_eq!(
        task.objects,
        vec![ObjectDiff {
            diff_type: DiffType::Edited,
            name: "Config".to_owned(),
            fields: vec![
                field(DiffType::None, "args[0]", "-g", "-g"),
                field(DiffType::None, "args[1]", "daemon off;", "daemon off;"),
                field(DiffType::Edited, "image", "nginx:1.25", "nginx:1.27"),
                field(DiffType::Added, "ports[0]", "", "http"),
            ],
            objects: vec![],
        }]
    );
}

#[test]
fn config_numbers_render_as_go_floats() {
    let mut old = base_job();
    task_mut(&mut old, 0, 0)["Config"] = json!({"port": 8080, "limit": 1_000_000, "ratio": 0.5});
    let mut new = base_job();
    task_mut(&mut new, 0, 0)["Config"] = json!({"port": 8081, "limit": 1_500_000, "ratio": 0.5});
    let diff = job_diff(&old, &new, false);
    let config = object(&diff.task_groups[0].tasks[0].objects, "Config");
    assert_eq!(
        config.fields,
        vec![
            field(DiffType::Edited, "limit", "1e+06", "1.5e+06"),
            field(DiffType::Edited, "port", "8080", "8081"),
        ]
    );
}

#[test]
fn task_added_and_task_deleted() {
    let old = base_job();
    let mut new = base_job();
    let mut sidecar = task_mut(&mut new, 0, 0).clone();
    sidecar["Name"] = json!("sidecar");
    sidecar["Driver"] = json!("exec");
    sidecar["Env"] = json!({});
    sidecar["Config"] = json!({"command": "/bin/true"});
    new["TaskGroups"][0]["Tasks"] = json!([sidecar]);

    let diff = job_diff(&old, &new, false);
    assert_eq!(diff.diff_type, DiffType::Edited);
    let group = &diff.task_groups[0];
    assert_eq!(group.diff_type, DiffType::Edited);
    let tasks: Vec<(&str, DiffType)> = group
        .tasks
        .iter()
        .map(|t| (t.name.as_str(), t.diff_type))
        .collect();
    assert_eq!(
        tasks,
        vec![("server", DiffType::Deleted), ("sidecar", DiffType::Added)]
    );

    let deleted = &group.tasks[0];
    assert!(
        deleted
            .fields
            .contains(&field(DiffType::Deleted, "Driver", "docker", ""))
    );
    assert!(
        deleted
            .fields
            .contains(&field(DiffType::Deleted, "Env[PORT]", "8080", ""))
    );
    assert!(
        deleted
            .fields
            .contains(&field(DiffType::Deleted, "KillTimeout", "5000000000", ""))
    );
    assert!(
        deleted
            .fields
            .contains(&field(DiffType::Deleted, "Leader", "false", ""))
    );
    // Empty strings are absent on both sides, so not listed.
    assert!(
        !deleted
            .fields
            .iter()
            .any(|f| f.name == "User" || f.name == "Name")
    );
    let names: Vec<&str> = deleted.objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, vec!["Config", "Resources", "LogConfig"]);
    assert!(
        deleted
            .objects
            .iter()
            .all(|o| o.diff_type == DiffType::Deleted)
    );

    let added = &group.tasks[1];
    assert!(
        added
            .fields
            .contains(&field(DiffType::Added, "Driver", "", "exec"))
    );
    let config = object(&added.objects, "Config");
    assert_eq!(config.diff_type, DiffType::Added);
    assert_eq!(
        config.fields,
        vec![field(DiffType::Added, "command", "", "/bin/true")]
    );
    let resources = object(&added.objects, "Resources");
    assert_eq!(resources.diff_type, DiffType::Added);
    // Every value field of the struct is listed, zeros included (SecretsMB is null here).
    assert_eq!(
        resources.fields,
        vec![
            field(DiffType::Added, "CPU", "", "100"),
            field(DiffType::Added, "Cores", "", "0"),
            field(DiffType::Added, "DiskMB", "", "0"),
            field(DiffType::Added, "IOPS", "", "0"),
            field(DiffType::Added, "MemoryMB", "", "300"),
            field(DiffType::Added, "MemoryMaxMB", "", "0"),
            field(DiffType::Added, "SecretsMB", "", "0"),
        ]
    );
}

#[test]
fn group_added_lists_everything_as_added() {
    let old = base_job();
    let mut new = base_job();
    let mut backend = group_mut(&mut new, 0).clone();
    backend["Name"] = json!("backend");
    backend["Count"] = json!(2);
    backend["ShutdownDelay"] = json!(5_000_000_000_i64);
    new["TaskGroups"] = json!([new["TaskGroups"][0].clone(), backend]);

    let diff = job_diff(&old, &new, true);
    assert_eq!(diff.diff_type, DiffType::Edited);
    let groups: Vec<(&str, DiffType)> = diff
        .task_groups
        .iter()
        .map(|g| (g.name.as_str(), g.diff_type))
        .collect();
    assert_eq!(
        groups,
        vec![("backend", DiffType::Added), ("frontend", DiffType::None)]
    );
    let added = &diff.task_groups[0];
    // Group fields are never contextual; a pointer ShutdownDelay is not flattened for an
    // added group (upstream only compares it between two existing groups).
    assert_eq!(added.fields, vec![field(DiffType::Added, "Count", "", "2")]);
    let restart = object(&added.objects, "RestartPolicy");
    assert_eq!(restart.diff_type, DiffType::Added);
    assert_eq!(
        restart.fields,
        vec![
            field(DiffType::Added, "Attempts", "", "2"),
            field(DiffType::Added, "Delay", "", "15000000000"),
            field(DiffType::Added, "Interval", "", "1800000000000"),
            field(DiffType::Added, "Mode", "", "fail"),
            field(DiffType::Added, "RenderTemplates", "", "false"),
        ]
    );
    assert_eq!(added.tasks.len(), 1);
    assert_eq!(added.tasks[0].diff_type, DiffType::Added);
    assert!(added.updates.is_none());
}

#[test]
fn group_deleted() {
    let mut old = base_job();
    let mut extra = group_mut(&mut old, 0).clone();
    extra["Name"] = json!("worker");
    old["TaskGroups"] = json!([old["TaskGroups"][0].clone(), extra]);
    let diff = job_diff(&old, &base_job(), false);
    let worker = &diff.task_groups[1];
    assert_eq!(
        (worker.name.as_str(), worker.diff_type),
        ("worker", DiffType::Deleted)
    );
    assert!(
        worker
            .fields
            .contains(&field(DiffType::Deleted, "Count", "1", ""))
    );
    assert_eq!(worker.tasks[0].diff_type, DiffType::Deleted);
}

#[test]
fn restart_policy_change_contextual_lists_unchanged_siblings() {
    let old = base_job();
    let mut new = base_job();
    group_mut(&mut new, 0)["RestartPolicy"]["Attempts"] = json!(5);
    group_mut(&mut new, 0)["RestartPolicy"]["RenderTemplates"] = json!(true);

    let diff = job_diff(&old, &new, true);
    let group = &diff.task_groups[0];
    assert_eq!(group.diff_type, DiffType::Edited);
    assert!(group.fields.is_empty());
    assert_eq!(
        group.objects,
        vec![ObjectDiff {
            diff_type: DiffType::Edited,
            name: "RestartPolicy".to_owned(),
            fields: vec![
                field(DiffType::Edited, "Attempts", "2", "5"),
                field(DiffType::None, "Delay", "15000000000", "15000000000"),
                field(DiffType::None, "Interval", "1800000000000", "1800000000000"),
                field(DiffType::None, "Mode", "fail", "fail"),
                field(DiffType::Edited, "RenderTemplates", "false", "true"),
            ],
            objects: vec![],
        }]
    );

    // Not contextual: only the changed fields.
    let diff = job_diff(&old, &new, false);
    let restart = object(&diff.task_groups[0].objects, "RestartPolicy");
    assert_eq!(restart.fields.len(), 2);
}

#[test]
fn removed_block_is_deleted_with_all_fields() {
    let old = base_job();
    let mut new = base_job();
    group_mut(&mut new, 0)["EphemeralDisk"] = Value::Null;
    let diff = job_diff(&old, &new, false);
    let disk = object(&diff.task_groups[0].objects, "EphemeralDisk");
    assert_eq!(disk.diff_type, DiffType::Deleted);
    assert_eq!(
        disk.fields,
        vec![
            field(DiffType::Deleted, "Migrate", "false", ""),
            field(DiffType::Deleted, "SizeMB", "300", ""),
            field(DiffType::Deleted, "Sticky", "false", ""),
        ]
    );
}

#[test]
fn ignored_fields_produce_no_diff() {
    let old = base_job();
    let mut new = base_job();
    new["Version"] = json!(7);
    new["ModifyIndex"] = json!(99);
    new["JobModifyIndex"] = json!(99);
    new["CreateIndex"] = json!(3);
    new["Stable"] = json!(true);
    new["SubmitTime"] = json!(1_800_000_000_000_000_000_i64);
    new["Status"] = json!("dead");
    new["StatusDescription"] = json!("stopped");
    new["Update"] = json!({"Stagger": 1, "MaxParallel": 9});
    new["SchedulerTokenID"] = json!("a-token");
    new["NomadTokenID"] = json!("a-token");
    new["VaultToken"] = json!("s.secret");
    for contextual in [false, true] {
        let diff = job_diff(&old, &new, contextual);
        assert_eq!(diff.diff_type, DiffType::None, "contextual={contextual}");
        assert!(diff.fields.is_empty(), "{:?}", diff.fields);
        assert!(diff.objects.is_empty());
    }
}

#[test]
fn spreads_are_not_diffed_as_upstream() {
    let old = base_job();
    let mut new = base_job();
    new["Spreads"] = json!([{"Attribute": "${node.datacenter}", "Weight": 50, "SpreadTarget": []}]);
    group_mut(&mut new, 0)["Spreads"] = new["Spreads"].clone();
    let diff = job_diff(&old, &new, true);
    // The group is compared whole, so it is Edited, with nothing listed.
    let group = &diff.task_groups[0];
    assert_eq!(group.diff_type, DiffType::Edited);
    assert!(group.fields.is_empty() && group.objects.is_empty());
    assert!(diff.fields.is_empty() && diff.objects.is_empty());

    // A job-level spread alone leaves the job None.
    let mut job_only = base_job();
    job_only["Spreads"] = new["Spreads"].clone();
    assert_eq!(job_diff(&old, &job_only, true).diff_type, DiffType::None);
}

#[test]
fn missing_old_job_is_added() {
    let diff = job_diff(&Value::Null, &base_job(), false);
    assert_eq!(diff.diff_type, DiffType::Added);
    assert_eq!(diff.id, "web");
    assert!(
        diff.fields
            .contains(&field(DiffType::Added, "Name", "", "web"))
    );
    assert!(
        diff.fields
            .contains(&field(DiffType::Added, "Priority", "", "50"))
    );
    assert!(
        diff.fields
            .contains(&field(DiffType::Added, "Stop", "", "false"))
    );
    assert!(
        !diff
            .fields
            .iter()
            .any(|f| f.name == "Version" || f.name == "ID")
    );
    assert_eq!(diff.task_groups[0].diff_type, DiffType::Added);

    let deleted = job_diff(&base_job(), &Value::Null, false);
    assert_eq!(deleted.diff_type, DiffType::Deleted);
    let none = job_diff(&Value::Null, &Value::Null, true);
    assert_eq!(none.diff_type, DiffType::None);
    assert!(none.id.is_empty());
}

#[test]
fn shutdown_delay_compared_between_existing_groups() {
    let old = base_job();
    let mut new = base_job();
    group_mut(&mut new, 0)["ShutdownDelay"] = json!(5_000_000_000_i64);
    let diff = job_diff(&old, &new, false);
    assert_eq!(
        diff.task_groups[0].fields,
        vec![field(DiffType::Added, "ShutdownDelay", "", "5000000000")]
    );
}

#[test]
fn group_update_ignores_stagger() {
    let mut old = base_job();
    group_mut(&mut old, 0)["Update"] = json!({"Stagger": 1, "MaxParallel": 1, "Canary": 0});
    let mut new = base_job();
    group_mut(&mut new, 0)["Update"] = json!({"Stagger": 2, "MaxParallel": 1, "Canary": 0});
    let diff = job_diff(&old, &new, true);
    // Only Stagger changed: no object reports it, yet the group (compared whole, as
    // upstream's DeepEqual) and so the job are Edited.
    assert_eq!(diff.task_groups[0].diff_type, DiffType::Edited);
    assert!(diff.task_groups[0].objects.is_empty());
    assert_eq!(diff.diff_type, DiffType::Edited);
}

#[test]
fn services_matched_by_name_and_port() {
    let service = |name: &str, port: &str, tags: Value| {
        json!({
            "Name": name,
            "PortLabel": port,
            "Provider": "nomad",
            "Tags": tags,
            "Checks": []
        })
    };
    let mut old = base_job();
    group_mut(&mut old, 0)["Services"] = json!([
        service("api", "http", json!(["v1"])),
        service("metrics", "prom", json!([]))
    ]);
    let mut new = base_job();
    group_mut(&mut new, 0)["Services"] = json!([
        service("metrics", "prom", json!([])),
        service("api", "http", json!(["v2"]))
    ]);
    let diff = job_diff(&old, &new, false);
    let group = &diff.task_groups[0];
    assert_eq!(group.objects.len(), 1, "{:#?}", group.objects);
    let api = &group.objects[0];
    assert_eq!(
        (api.name.as_str(), api.diff_type),
        ("Service", DiffType::Edited)
    );
    assert!(api.fields.is_empty());
    let tags = object(&api.objects, "Tags");
    assert_eq!(tags.diff_type, DiffType::Edited);
    assert_eq!(
        tags.fields,
        vec![
            field(DiffType::Added, "Tags", "", "v2"),
            field(DiffType::Deleted, "Tags", "v1", ""),
        ]
    );
}

#[test]
fn network_change_is_delete_plus_add() {
    let network = |to: i64| {
        json!({
            "Mode": "bridge",
            "MBits": 0,
            "DynamicPorts": [{"Label": "http", "Value": 0, "To": to, "HostNetwork": "default"}],
            "ReservedPorts": []
        })
    };
    let mut old = base_job();
    group_mut(&mut old, 0)["Networks"] = json!([network(8080)]);
    let mut new = base_job();
    group_mut(&mut new, 0)["Networks"] = json!([network(9090)]);
    let diff = job_diff(&old, &new, false);
    let group = &diff.task_groups[0];
    let types: Vec<(&str, DiffType)> = group
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.diff_type))
        .collect();
    assert_eq!(
        types,
        vec![("Network", DiffType::Added), ("Network", DiffType::Deleted)]
    );
    let added = &group.objects[0];
    assert_eq!(
        added.fields,
        vec![field(DiffType::Added, "Mode", "", "bridge")]
    );
    let port = object(&added.objects, "Dynamic Port");
    // Dynamic ports leave Value out.
    assert_eq!(
        port.fields,
        vec![
            field(DiffType::Added, "HostNetwork", "", "default"),
            field(DiffType::Added, "Label", "", "http"),
            field(DiffType::Added, "To", "", "9090"),
        ]
    );
}

#[test]
fn template_edit_matched_by_destination() {
    let template = |dest: &str, data: &str| {
        json!({
            "DestPath": dest,
            "EmbeddedTmpl": data,
            "ChangeMode": "restart",
            "Splay": 5_000_000_000_i64,
            "Wait": null
        })
    };
    let mut old = base_job();
    task_mut(&mut old, 0, 0)["Templates"] =
        json!([template("a.conf", "x"), template("b.conf", "y")]);
    let mut new = base_job();
    task_mut(&mut new, 0, 0)["Templates"] =
        json!([template("b.conf", "z"), template("a.conf", "x")]);
    let diff = job_diff(&old, &new, false);
    let objects = &diff.task_groups[0].tasks[0].objects;
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0].diff_type, DiffType::Edited);
    assert_eq!(
        objects[0].fields,
        vec![field(DiffType::Edited, "EmbeddedTmpl", "y", "z")]
    );
}

#[test]
fn serializes_like_nomad() {
    let old = base_job();
    let mut new = base_job();
    group_mut(&mut new, 0)["Count"] = json!(2);
    let value = serde_json::to_value(job_diff(&old, &new, true)).unwrap();
    assert_eq!(
        value,
        json!({
            "Type": "Edited",
            "ID": "web",
            "Fields": null,
            "Objects": null,
            "TaskGroups": [{
                "Type": "Edited",
                "Name": "frontend",
                "Fields": [
                    {"Type": "Edited", "Name": "Count", "Old": "1", "New": "2", "Annotations": null}
                ],
                "Objects": null,
                "Tasks": [
                    {
                        "Type": "None",
                        "Name": "server",
                        "Fields": null,
                        "Objects": null,
                        "Annotations": null
                    }
                ],
                "Updates": null
            }]
        })
    );
}

#[test]
fn ill_typed_input_does_not_panic() {
    let odd = json!({
        "ID": 5,
        "TaskGroups": [1, null, {"Name": 3, "Tasks": "x", "RestartPolicy": []}],
        "Meta": [1]
    });
    let diff = job_diff(&odd, &base_job(), true);
    assert_eq!(diff.diff_type, DiffType::Edited);
    let _ = job_diff(&json!([1, 2]), &json!("job"), false);
    let _ = job_diff(&base_job(), &odd, true);
}

#[test]
fn go_float_formatting() {
    let cases = [
        (8080.0, "8080"),
        (0.5, "0.5"),
        (123_456.0, "123456"),
        (1_000_000.0, "1e+06"),
        (1_234_567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5, "-2.5"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (0.0, "0"),
    ];
    for (value, expected) in cases {
        assert_eq!(go_float(value), expected, "{value}");
    }
}

#[test]
fn connect_timeouts_render_as_go_durations() {
    let cases = [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (1_500_000, "1.5ms"),
        (1_000_000_000, "1s"),
        (2_500_000_000, "2.5s"),
        (90_000_000_000, "1m30s"),
        (3_600_000_000_000, "1h0m0s"),
        (-1_000_000_000, "-1s"),
    ];
    for (nanos, expected) in cases {
        assert_eq!(stdx::duration::format_go(nanos), expected, "{nanos}");
    }
}
