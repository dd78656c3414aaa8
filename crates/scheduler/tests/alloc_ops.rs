//! The client allocation operations end to end: a real scheduler on loopback, a real client
//! agent polling it for calls, and raw_exec tasks that are real shell processes. Signal (a
//! `trap` sees it), restart in place (same allocation, upstream's events in order, not counted
//! against the restart policy), stop with its Killing/Killed events and shutdown delays, logs
//! (plain, framed, from the end, followed as they grow) and the allocation filesystem
//! (ls, stat, cat, readat, escapes refused).
//!
//! Invariant: every wait is a bounded poll; each test's cluster kills its processes on drop.

mod alloc_ops_support;

use std::time::Duration;

use alloc_ops_support::{Cluster, shell_job};
use base64::Engine as _;
use serde_json::{Value, json};

/// A task that prints what it traps and keeps running.
const TRAPPER: &str =
    "trap 'echo got-USR1' USR1; trap 'echo got-HUP' HUP; echo started; while :; do sleep 0.1; done";

async fn plain_log(cluster: &Cluster, alloc_id: &str) -> String {
    let (status, body) = cluster
        .send(
            "GET",
            &format!("/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&plain=true"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_reaches_the_trap_of_a_raw_exec_task_and_is_a_signaling_event() {
    let cluster = Cluster::start(false).await;
    let alloc_id = cluster.run_job(shell_job("trapper", TRAPPER)).await;
    cluster
        .poll("the trap installed", || async {
            plain_log(&cluster, &alloc_id)
                .await
                .contains("started")
                .then_some(())
        })
        .await;

    let path = format!("/v1/client/allocation/{alloc_id}/signal");
    let (status, body) = cluster
        .send(
            "POST",
            &path,
            Some(&json!({ "Signal": "SIGUSR1", "Task": "t" })),
        )
        .await;
    assert_eq!((status, body.as_str()), (200, "{}"));
    // python-nomad's shape: "Task": null means every task.
    let (status, _) = cluster
        .send(
            "PUT",
            &path,
            Some(&json!({ "Signal": "HUP", "Task": null })),
        )
        .await;
    assert_eq!(status, 200);
    cluster
        .poll("both signals trapped", || async {
            let log = plain_log(&cluster, &alloc_id).await;
            (log.contains("got-USR1") && log.contains("got-HUP")).then_some(())
        })
        .await;
    let events = cluster
        .wait_events(&alloc_id, "t", &["Signaling", "Signaling"])
        .await;
    assert_eq!(events[events.len() - 2]["Details"]["signal"], "SIGUSR1");
    assert_eq!(events[events.len() - 1]["Details"]["signal"], "HUP");

    // Bad input: 4xx in Nomad's plain-text shape, and no event.
    for (body, status, text) in [
        (
            json!({ "Signal": "SIGNOPE" }),
            400,
            "invalid signal: SIGNOPE",
        ),
        (json!({ "Task": "t" }), 400, "invalid signal"),
        (json!({ "Signal": 9 }), 400, "Signal must be a string"),
        (
            json!({ "Signal": "SIGUSR1", "Task": "other" }),
            404,
            "Task not found",
        ),
    ] {
        let (got, text_got) = cluster.send("POST", &path, Some(&body)).await;
        assert_eq!(got, status, "{body}: {text_got}");
        assert!(
            text_got.contains(text),
            "{body}: {text_got:?} lacks {text:?}"
        );
    }
    let unknown = "00000000-0000-0000-0000-000000000000";
    let (status, body) = cluster
        .send(
            "POST",
            &format!("/v1/client/allocation/{unknown}/signal"),
            Some(&json!({ "Signal": "SIGUSR1" })),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(body.trim_end(), format!("Unknown allocation \"{unknown}\""));
    assert_eq!(
        cluster
            .event_types(&alloc_id, "t")
            .await
            .iter()
            .filter(|kind| *kind == "Signaling")
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_allocation_emits_upstream_events_and_skips_the_policy() {
    let cluster = Cluster::start(false).await;
    let mut job = shell_job("restarter", "echo run-$$; while :; do sleep 0.1; done");
    // A policy that allows no restarts: user restarts do not count against it.
    job["TaskGroups"][0]["RestartPolicy"] =
        json!({ "Attempts": 0, "Interval": 60_000_000_000_i64, "Delay": 0, "Mode": "fail" });
    let alloc_id = cluster.run_job(job).await;
    let path = format!("/v1/client/allocation/{alloc_id}/restart");

    // python-nomad's restart_allocation sends no body: the running tasks restart.
    let (status, body) = cluster.send("POST", &path, None).await;
    assert_eq!((status, body.as_str()), (200, "{}"));
    let tail = ["Restart Signaled", "Terminated", "Restarting", "Started"];
    let events = cluster.wait_events(&alloc_id, "t", &tail).await;
    let signaled = &events[events.len() - 4];
    assert_eq!(
        signaled["RestartReason"],
        "User requested running tasks to restart"
    );
    assert_eq!(signaled["DisplayMessage"], signaled["RestartReason"]);
    assert_eq!(events[events.len() - 2]["StartDelay"], 0);

    let (status, _) = cluster
        .send("PUT", &path, Some(&json!({ "TaskName": "t" })))
        .await;
    assert_eq!(status, 200);
    // A restart answers once the old process is gone; the next one waits for the new one
    // (an `AllTasks` restart skips a task that is not running, as it was mid-restart here on
    // a loaded host and the third restart never came).
    cluster
        .poll("the second restart's events", || async {
            let events = cluster.wait_events(&alloc_id, "t", &tail).await;
            (events[events.len() - 4]["RestartReason"] == "User requested task to restart")
                .then_some(())
        })
        .await;
    let (status, _) = cluster
        .send("PUT", &path, Some(&json!({ "AllTasks": true })))
        .await;
    assert_eq!(status, 200);
    cluster
        .poll("the third restart's events", || async {
            let alloc = cluster.alloc(&alloc_id).await;
            let events = alloc["TaskStates"]["t"]["Events"].as_array()?.clone();
            let types: Vec<&str> = events
                .iter()
                .map(|e| e["Type"].as_str().unwrap_or(""))
                .collect();
            (types.ends_with(&tail)
                && events[events.len() - 4]["RestartReason"]
                    == "User requested all tasks to restart")
                .then_some(())
        })
        .await;

    // Still the same allocation, running, not failed, with its restarts counted.
    let alloc = cluster.alloc(&alloc_id).await;
    assert_eq!(alloc["ID"], alloc_id.as_str());
    assert_eq!(alloc["ClientStatus"], "running");
    assert_eq!(alloc["TaskStates"]["t"]["Failed"], false);
    cluster
        .poll("three restarts recorded", || async {
            let alloc = cluster.alloc(&alloc_id).await;
            (alloc["TaskStates"]["t"]["Restarts"] == 3).then_some(())
        })
        .await;
    let (_, allocs) = cluster.get("/v1/job/restarter/allocations").await;
    assert_eq!(allocs.as_array().map(Vec::len), Some(1), "{allocs}");

    for (body, status, text) in [
        (
            json!({ "TaskName": "t", "AllTasks": true }),
            400,
            "task name cannot be set when restarting all tasks",
        ),
        (json!({ "TaskName": "nope" }), 404, "Task not found"),
        (
            json!({ "AllTasks": "yes" }),
            400,
            "AllTasks must be a boolean",
        ),
        (json!([1]), 400, "must be a JSON object"),
    ] {
        let (got, text_got) = cluster.send("POST", &path, Some(&body)).await;
        assert_eq!(got, status, "{body}: {text_got}");
        assert!(
            text_got.contains(text),
            "{body}: {text_got:?} lacks {text:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_emits_killing_and_killed_and_waits_out_the_shutdown_delay_unless_skipped() {
    let cluster = Cluster::start(false).await;
    let mut job = shell_job("delayed", "while :; do sleep 0.1; done");
    job["TaskGroups"][0]["Tasks"][0]["ShutdownDelay"] = json!(1_000_000_000_i64);
    let alloc_id = cluster.run_job(job).await;

    let (status, body) = cluster
        .send("POST", &format!("/v1/allocation/{alloc_id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let tail = [
        "Killing",
        "Waiting for shutdown delay",
        "Terminated",
        "Killed",
    ];
    let events = cluster.wait_events(&alloc_id, "t", &tail).await;
    let n = events.len();
    assert_eq!(events[n - 4]["KillTimeout"], 2_000_000_000_i64);
    assert_eq!(
        events[n - 3]["DisplayMessage"],
        "Waiting for shutdown_delay of 1s before killing the task."
    );
    let waited = events[n - 2]["Time"].as_i64().unwrap() - events[n - 3]["Time"].as_i64().unwrap();
    assert!(waited >= 900_000_000, "the delay was waited: {waited} ns");

    // The replacement, stopped with no_shutdown_delay, skips it.
    let replacement = cluster
        .poll("the replacement running", || async {
            let (_, allocs) = cluster.get("/v1/job/delayed/allocations").await;
            allocs.as_array()?.iter().find_map(|alloc| {
                (alloc["ID"] != alloc_id.as_str() && alloc["ClientStatus"] == "running")
                    .then(|| alloc["ID"].as_str().unwrap_or_default().to_owned())
            })
        })
        .await;
    let (status, _) = cluster
        .send(
            "POST",
            &format!("/v1/allocation/{replacement}/stop?no_shutdown_delay=true"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let tail = ["Killing", "Skipping shutdown delay", "Terminated", "Killed"];
    let events = cluster.wait_events(&replacement, "t", &tail).await;
    let n = events.len();
    let waited = events[n - 2]["Time"].as_i64().unwrap() - events[n - 3]["Time"].as_i64().unwrap();
    assert!(waited < 900_000_000, "no delay: {waited} ns");
    let alloc = cluster.alloc(&replacement).await;
    cluster
        .poll("the stopped allocation complete", || async {
            let alloc = cluster.alloc(&replacement).await;
            (alloc["ClientStatus"] == "complete").then_some(())
        })
        .await;
    assert_eq!(alloc["DesiredStatus"], "stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_read_plain_framed_from_either_end_and_follow_new_output() {
    let cluster = Cluster::start(false).await;
    let script = "echo err-line >&2; i=0; while :; do i=$((i+1)); echo line-$i; sleep 0.1; done";
    let alloc_id = cluster.run_job(shell_job("logger", script)).await;
    cluster
        .poll("some output", || async {
            plain_log(&cluster, &alloc_id)
                .await
                .contains("line-3")
                .then_some(())
        })
        .await;

    let base = format!("/v1/client/fs/logs/{alloc_id}?task=t");
    let (status, stderr) = cluster
        .send("GET", &format!("{base}&type=stderr&plain=true"), None)
        .await;
    assert_eq!((status, stderr.as_str()), (200, "err-line\n"));
    let (_, tail) = cluster
        .send(
            "GET",
            &format!("{base}&type=stderr&plain=true&origin=end&offset=5"),
            None,
        )
        .await;
    assert_eq!(tail, "line\n");
    let (_, skipped) = cluster
        .send(
            "GET",
            &format!("{base}&type=stdout&plain=true&offset=7"),
            None,
        )
        .await;
    assert!(skipped.starts_with("line-2\n"), "{skipped:?}");

    // Framed: concatenated {"Offset","Data","File"} objects, Offset after the data.
    let (status, framed) = cluster
        .send("GET", &format!("{base}&type=stderr"), None)
        .await;
    assert_eq!(status, 200);
    let frame: Value = serde_json::from_str(&framed).expect("one frame");
    assert_eq!(frame["File"], "alloc/logs/t.stderr.0");
    assert_eq!(frame["Offset"], 9);
    let data = base64::engine::general_purpose::STANDARD
        .decode(frame["Data"].as_str().unwrap())
        .unwrap();
    assert_eq!(data, b"err-line\n");

    // Follow: the response keeps streaming what the task writes next.
    let mut response = cluster
        .http
        .get(cluster.url(&format!(
            "{base}&type=stdout&plain=true&follow=true&origin=end&offset=0"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut seen = String::new();
    let started = std::time::Instant::now();
    while seen.matches("line-").count() < 5 {
        assert!(started.elapsed() < Duration::from_secs(10), "{seen:?}");
        let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk())
            .await
            .expect("more output within 5 s")
            .unwrap()
            .expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);

    for (query, text) in [
        ("type=stdout", "must provide task name"),
        ("task=t&type=stdin", "must provide log type (stdout/stderr)"),
        (
            "task=t&type=stdout&origin=middle",
            "origin must be start or end",
        ),
        ("task=t&type=stdout&offset=x", "error parsing offset"),
        (
            "task=t&type=stdout&follow=maybe",
            "failed to parse follow field to boolean",
        ),
        ("task=nope&type=stdout", "unknown task name \"nope\""),
    ] {
        let (status, body) = cluster
            .send(
                "GET",
                &format!("/v1/client/fs/logs/{alloc_id}?{query}"),
                None,
            )
            .await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(text), "{query}: {body:?} lacks {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allocation_filesystem_lists_stats_and_reads_inside_its_directory_only() {
    let cluster = Cluster::start(false).await;
    let script = "printf 'hello world' > local/greeting; while :; do sleep 0.1; done";
    let alloc_id = cluster.run_job(shell_job("files", script)).await;
    let fs = |op: &str, path: &str| format!("/v1/client/fs/{op}/{alloc_id}?path={path}");
    cluster
        .poll("the file written", || async {
            (cluster
                .send("GET", &fs("cat", "/t/local/greeting"), None)
                .await
                .0
                == 200)
                .then_some(())
        })
        .await;

    let (status, root) = cluster.get(&format!("/v1/client/fs/ls/{alloc_id}")).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = root
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alloc", "t"]);
    assert_eq!(root[0]["IsDir"], true);
    assert!(root[0]["FileMode"].as_str().unwrap().starts_with('d'));

    let (_, local) = cluster.get(&fs("ls", "/t/local")).await;
    assert_eq!(local[0]["Name"], "greeting");
    assert_eq!(local[0]["Size"], 11);
    assert_eq!(local[0]["ContentType"], "text/plain; charset=utf-8");
    let (status, stat) = cluster.get(&fs("stat", "/t/local/greeting")).await;
    assert_eq!(status, 200);
    assert_eq!(stat["Name"], "greeting");
    assert_eq!(stat["IsDir"], false);
    assert_eq!(stat["FileMode"], "-rw-r--r--");
    assert!(stat["ModTime"].as_str().unwrap().ends_with('Z'));

    let (status, text) = cluster
        .send("GET", &fs("cat", "/t/local/greeting"), None)
        .await;
    assert_eq!((status, text.as_str()), (200, "hello world"));
    let (_, part) = cluster
        .send(
            "GET",
            &format!("{}&offset=6&limit=3", fs("readat", "/t/local/greeting")),
            None,
        )
        .await;
    assert_eq!(part, "wor");

    for (op, path, status, text) in [
        ("ls", "/../..", 400, "Path escapes the alloc directory"),
        ("cat", "t/../../x", 400, "Path escapes the alloc directory"),
        ("stat", "/nope", 404, "No such file"),
        ("cat", "/t", 400, "is a directory"),
    ] {
        let (got, body) = cluster.send("GET", &fs(op, path), None).await;
        assert_eq!(got, status, "{op} {path}: {body}");
        assert!(body.contains(text), "{op} {path}: {body:?} lacks {text:?}");
    }
    let (status, body) = cluster
        .send(
            "GET",
            &format!("{}&offset=x&limit=1", fs("readat", "/")),
            None,
        )
        .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_endpoints_need_their_capabilities() {
    let mut cluster = Cluster::start(true).await;
    let alloc_id = cluster
        .run_job(shell_job("guarded", "while :; do sleep 0.1; done"))
        .await;
    let reader = cluster
        .token_with(
            "reader",
            r#"namespace "default" { capabilities = ["read-job", "read-logs"] }"#,
        )
        .await;
    let operator = cluster
        .token_with(
            "operator",
            r#"namespace "default" { capabilities = ["alloc-lifecycle", "read-fs"] }"#,
        )
        .await;
    let signal = format!("/v1/client/allocation/{alloc_id}/signal");
    let body = json!({ "Signal": "SIGUSR1" });

    cluster.token = None;
    assert_eq!(cluster.send("POST", &signal, Some(&body)).await.0, 403);
    cluster.token = Some(reader);
    assert_eq!(cluster.send("POST", &signal, Some(&body)).await.0, 403);
    assert_eq!(
        cluster
            .send("GET", &format!("/v1/client/fs/ls/{alloc_id}"), None)
            .await
            .0,
        403
    );
    let logs = format!("/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&plain=true");
    assert_eq!(cluster.send("GET", &logs, None).await.0, 200);
    cluster.token = Some(operator);
    let (status, text) = cluster.send("POST", &signal, Some(&body)).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        cluster
            .send("GET", &format!("/v1/client/fs/ls/{alloc_id}"), None)
            .await
            .0,
        200
    );
    assert_eq!(cluster.send("GET", &logs, None).await.0, 403);
}
