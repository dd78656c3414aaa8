//! The runtime of allocations end to end: a real scheduler on loopback, a real client agent,
//! raw_exec tasks that are real processes. Provider-`nomad` services registered with a
//! dynamic port the client assigned (the task listens on its `NOMAD_PORT_<label>`), HTTP, TCP
//! and script checks that flip from failure to success when the port starts listening or a
//! file appears, services gone once the job is stopped; a scheduled task paused outside its
//! window (computed around now, in a fixed-offset zone of the system's zoneinfo) and run,
//! paused and handed back to its schedule through the pause endpoint, with upstream's
//! `ScheduleState`s and `Pausing` / `Running` events; a script check of an `exec` task run
//! inside the task's root and namespaces.
//!
//! Invariant: every wait is a bounded poll; each test's cluster kills its processes on drop.

mod alloc_ops_support;

use std::time::{SystemTime, UNIX_EPOCH};

use alloc_ops_support::Cluster;
use serde_json::{Value, json};

/// The Python interpreter's real path (a task's environment may lack pyenv's shims' setup).
fn python() -> String {
    let output = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A service job whose task waits, marks itself ready, then serves HTTP on its dynamic port.
fn web_job(id: &str) -> Value {
    let script = format!(
        "sleep 3; touch \"$NOMAD_TASK_DIR/ready\"; exec {} -m http.server \"$NOMAD_PORT_http\" --bind 127.0.0.1",
        python()
    );
    let check = |name: &str, kind: &str| {
        let mut check = json!({
            "Name": name, "Type": kind, "Interval": 300_000_000_i64, "Timeout": 1_000_000_000_i64,
        });
        match kind {
            "http" => check["Path"] = json!("/"),
            "script" => {
                check["Command"] = json!("/bin/sh");
                check["Args"] = json!(["-c", "test -e \"$NOMAD_TASK_DIR/ready\""]);
            }
            _ => {}
        }
        check
    };
    json!({
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Networks": [{"DynamicPorts": [{"Label": "http", "To": -1}]}],
            "Services": [{"Name": format!("{id}-group"), "PortLabel": "http", "Provider": "nomad"}],
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "KillTimeout": 2_000_000_000_i64,
                "Resources": {"CPU": 100, "MemoryMB": 32},
                "Services": [{
                    "Name": id, "PortLabel": "http", "Tags": ["v1"], "Provider": "nomad",
                    "Checks": [check("http-alive", "http"), check("tcp-alive", "tcp"),
                               check("ready-file", "script")],
                }],
            }],
        }],
    })
}

/// The statuses of an allocation's checks by name.
async fn check_statuses(cluster: &Cluster, alloc_id: &str) -> Vec<(String, String)> {
    let (status, checks) = cluster
        .get(&format!("/v1/allocation/{alloc_id}/checks"))
        .await;
    assert_eq!(status, 200, "{checks}");
    let mut list: Vec<(String, String)> = checks
        .as_object()
        .map(|checks| {
            checks
                .values()
                .map(|check| {
                    (
                        check["Check"].as_str().unwrap_or_default().to_owned(),
                        check["Status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    list.sort();
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_a_dynamic_port_and_checks_flip_when_the_task_listens_then_go_at_stop() {
    let cluster = Cluster::start(false).await;
    let alloc_id = cluster.run_job(web_job("web")).await;

    let services = cluster
        .poll("both services registered", || async {
            let (_, services) = cluster
                .get(&format!("/v1/allocation/{alloc_id}/services"))
                .await;
            let list = services.as_array()?.clone();
            (list.len() == 2).then_some(list)
        })
        .await;
    let task_service = services
        .iter()
        .find(|service| service["ServiceName"] == "web")
        .expect("the task's service");
    let port = task_service["Port"].as_i64().unwrap();
    assert!((20000..=32000).contains(&port), "{task_service}");
    assert_eq!(task_service["Address"], "127.0.0.1");
    assert_eq!(task_service["AllocID"], alloc_id.as_str());
    assert_eq!(task_service["JobID"], "web");
    assert_eq!(task_service["Namespace"], "default");
    assert_eq!(task_service["Datacenter"], "dc1");
    assert_eq!(task_service["Tags"], json!(["v1"]));
    assert_eq!(
        task_service["ID"],
        format!("_nomad-task-{alloc_id}-t-web-http")
    );
    let group_service = services
        .iter()
        .find(|service| service["ServiceName"] == "web-group")
        .expect("the group's service");
    assert_eq!(group_service["Port"], port, "one port label, one port");
    let (_, by_name) = cluster.get("/v1/service/web").await;
    assert_eq!(by_name.as_array().map(Vec::len), Some(1), "{by_name}");

    // Before the task listens (and before its ready file) every check fails...
    cluster
        .poll("the checks failing", || async {
            let statuses = check_statuses(&cluster, &alloc_id).await;
            (statuses.len() == 3 && statuses.iter().all(|(_, status)| status == "failure"))
                .then_some(())
        })
        .await;
    // ...and once it does, they pass, with upstream's outputs.
    cluster
        .poll("the checks passing", || async {
            let statuses = check_statuses(&cluster, &alloc_id).await;
            statuses
                .iter()
                .all(|(_, status)| status == "success")
                .then_some(())
        })
        .await;
    let (_, checks) = cluster
        .get(&format!("/v1/allocation/{alloc_id}/checks"))
        .await;
    let by_name = |name: &str| {
        checks
            .as_object()
            .unwrap()
            .values()
            .find(|check| check["Check"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("http-alive")["Output"], "nomad: http ok");
    assert_eq!(by_name("http-alive")["StatusCode"], 200);
    assert_eq!(by_name("tcp-alive")["Output"], "nomad: tcp ok");
    assert_eq!(by_name("tcp-alive")["Service"], "web");
    assert_eq!(by_name("tcp-alive")["Mode"], "healthiness");
    assert_eq!(by_name("tcp-alive")["Group"], "web.g[0]");
    assert!(by_name("ready-file")["Timestamp"].as_i64().unwrap() > 1_600_000_000);

    let (status, body) = cluster.send("DELETE", "/v1/job/web", None).await;
    assert_eq!(status, 200, "{body}");
    cluster
        .poll("the services deregistered", || async {
            let (_, services) = cluster
                .get(&format!("/v1/allocation/{alloc_id}/services"))
                .await;
            let (_, by_name) = cluster.get("/v1/service/web").await;
            (services == json!([]) && by_name == json!([])).then_some(())
        })
        .await;
    let (_, checks) = cluster
        .get(&format!("/v1/allocation/{alloc_id}/checks"))
        .await;
    assert_eq!(checks, json!({}));
}

/// A fixed-offset zone in which it is now between 03:00 and 20:59, and the local hour and
/// minute there.
fn daytime_zone() -> (String, i64, i64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (utc_hour, minute) = ((now / 3600) % 24, (now / 60) % 60);
    let offset = (-12..=14_i64)
        .find(|offset| (3..=20).contains(&(utc_hour + offset).rem_euclid(24)))
        .unwrap();
    let zone = match offset {
        0 => "UTC".to_owned(),
        // POSIX signs: Etc/GMT-3 is three hours ahead of UTC.
        offset if offset > 0 => format!("Etc/GMT-{offset}"),
        offset => format!("Etc/GMT+{}", -offset),
    };
    (zone, (utc_hour + offset).rem_euclid(24), minute)
}

/// A service job of one task running under `schedule`.
fn scheduled_job(id: &str, start: &str, end: &str, zone: &str) -> Value {
    json!({
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", "echo up; while :; do sleep 0.1; done"]},
                "KillTimeout": 2_000_000_000_i64,
                "Resources": {"CPU": 100, "MemoryMB": 32},
                "Schedule": {"Cron": {"Start": start, "End": end, "Timezone": zone}},
            }],
        }],
    })
}

/// Registers `job` and returns its allocation's ID once the client reports it.
async fn placed(cluster: &Cluster, job: Value) -> String {
    let job_id = job["ID"].as_str().unwrap().to_owned();
    let (status, body) = cluster
        .send("POST", "/v1/jobs", Some(&json!({ "Job": job })))
        .await;
    assert_eq!(status, 200, "{body}");
    cluster
        .poll("the allocation on the client", || async {
            let (_, allocs) = cluster.get(&format!("/v1/job/{job_id}/allocations")).await;
            allocs.as_array()?.iter().find_map(|alloc| {
                let events = alloc["TaskStates"]["t"]["Events"].as_array()?;
                (!events.is_empty()).then(|| alloc["ID"].as_str().unwrap().to_owned())
            })
        })
        .await
}

async fn schedule_state(cluster: &Cluster, alloc_id: &str) -> String {
    let (status, body) = cluster
        .get(&format!("/v1/client/allocation/{alloc_id}/pause?task=t"))
        .await;
    assert_eq!(status, 200, "{body}");
    body["ScheduleState"].as_str().unwrap().to_owned()
}

async fn wait_state(cluster: &Cluster, alloc_id: &str, wanted: &str) {
    cluster
        .poll(&format!("ScheduleState {wanted:?}"), || async {
            (schedule_state(cluster, alloc_id).await == wanted).then_some(())
        })
        .await;
}

async fn set_pause(cluster: &Cluster, alloc_id: &str, wanted: &str) {
    let (status, body) = cluster
        .send(
            "POST",
            &format!("/v1/client/allocation/{alloc_id}/pause"),
            Some(&json!({"Task": "t", "ScheduleState": wanted})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"Index\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outside_its_window_is_paused_until_run_and_follows_its_schedule_again() {
    let cluster = Cluster::start(false).await;
    let (zone, hour, minute) = daytime_zone();
    // A window two hours from now: outside it.
    let job = scheduled_job(
        "later",
        &format!("{minute} {} * * * *", hour + 2),
        &format!("{minute} {}", hour + 3),
        &zone,
    );
    let alloc_id = placed(&cluster, job).await;
    cluster
        .wait_events(&alloc_id, "t", &["Received", "Pausing"])
        .await;
    wait_state(&cluster, &alloc_id, "scheduled_pause").await;
    let alloc = cluster.alloc(&alloc_id).await;
    assert_eq!(alloc["TaskStates"]["t"]["State"], "pending");
    let pausing = &alloc["TaskStates"]["t"]["Events"][1];
    assert_eq!(pausing["DisplayMessage"], "Task is outside its schedule");

    set_pause(&cluster, &alloc_id, "run").await;
    cluster
        .wait_events(
            &alloc_id,
            "t",
            &["Pausing", "Running", "Task Setup", "Started"],
        )
        .await;
    wait_state(&cluster, &alloc_id, "force_run").await;

    set_pause(&cluster, &alloc_id, "pause").await;
    cluster
        .wait_events(&alloc_id, "t", &["Started", "Pausing", "Terminated"])
        .await;
    wait_state(&cluster, &alloc_id, "force_pause").await;
    let alloc = cluster.alloc(&alloc_id).await;
    assert_eq!(alloc["TaskStates"]["t"]["State"], "pending");
    assert_eq!(
        alloc["TaskStates"]["t"]["Restarts"], 0,
        "a pause is no restart"
    );

    // Back to the schedule: still outside the window.
    set_pause(&cluster, &alloc_id, "scheduled").await;
    wait_state(&cluster, &alloc_id, "scheduled_pause").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_inside_its_window_runs_and_reads_an_empty_schedule_state() {
    let cluster = Cluster::start(false).await;
    let (zone, hour, _) = daytime_zone();
    let job = scheduled_job(
        "now",
        &format!("0 {} * * *", hour - 1),
        &format!("0 {}", hour + 2),
        &zone,
    );
    let alloc_id = cluster.run_job(job).await;
    wait_state(&cluster, &alloc_id, "").await;
    let types = cluster.event_types(&alloc_id, "t").await;
    assert_eq!(types, ["Received", "Task Setup", "Started"]);

    let (status, body) = cluster
        .send(
            "POST",
            &format!("/v1/client/allocation/{alloc_id}/pause"),
            Some(&json!({"Task": "t", "ScheduleState": "sleep"})),
        )
        .await;
    assert_eq!(
        (status, body.trim()),
        (400, "Not a valid task schedule state")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_check_of_an_exec_task_runs_inside_the_tasks_root_and_namespaces() {
    let cluster = Cluster::start(false).await;
    // The check passes only where the task is: /local is the task's local dir in its root
    // (no such directory on the host), and PID 1 is the task's init; run on the host, it
    // fails forever.
    let check = json!({
        "Name": "inside", "Type": "script", "Interval": 300_000_000_i64,
        "Timeout": 2_000_000_000_i64, "Command": "/bin/sh",
        "Args": ["-c", "test -e /local/ready && grep -q cairn-init /proc/1/cmdline && echo inside"],
    });
    let job = json!({
        "ID": "isolated-check", "Name": "isolated-check", "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Tasks": [{
                "Name": "t", "Driver": "exec",
                "Config": {"command": "/bin/sh",
                           "args": ["-c", "touch /local/ready; while :; do sleep 0.1; done"]},
                "KillTimeout": 2_000_000_000_i64,
                "Resources": {"CPU": 100, "MemoryMB": 64},
                "Services": [{"Name": "isolated", "Provider": "nomad", "Checks": [check]}],
            }],
        }],
    });
    let alloc_id = cluster.run_job(job).await;
    cluster
        .poll("the check passing inside the task", || async {
            let (_, checks) = cluster
                .get(&format!("/v1/allocation/{alloc_id}/checks"))
                .await;
            let check = checks.as_object()?.values().next()?.clone();
            (check["Status"] == "success").then_some(check)
        })
        .await;
    let (_, checks) = cluster
        .get(&format!("/v1/allocation/{alloc_id}/checks"))
        .await;
    let check = checks.as_object().unwrap().values().next().unwrap();
    assert_eq!(check["Output"].as_str().map(str::trim), Some("inside"));
}
