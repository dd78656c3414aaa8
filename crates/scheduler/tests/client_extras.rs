//! Client features beyond the allocation operations, end to end with a real scheduler on
//! loopback, a real client agent and raw_exec shell tasks: ports assigned at placement (the
//! API shows the ports the task's environment sees, never shared on the node), the followed
//! file stream (`/v1/client/fs/stream`), allocation and host statistics, and garbage
//! collection of terminal allocations' directories.
//!
//! Invariant: every wait is a bounded poll; each test's cluster kills its processes on drop.

mod alloc_ops_support;

use std::collections::BTreeSet;
use std::time::Duration;

use alloc_ops_support::{Cluster, shell_job};
use base64::Engine as _;
use serde_json::{Value, json};

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

/// Every running allocation of a job, once `count` run.
async fn running_allocs(cluster: &Cluster, job_id: &str, count: usize) -> Vec<String> {
    cluster
        .poll("the allocations running", || async {
            let (_, allocs) = cluster.get(&format!("/v1/job/{job_id}/allocations")).await;
            let ids: Vec<String> = allocs
                .as_array()?
                .iter()
                .filter(|alloc| alloc["ClientStatus"] == "running")
                .filter_map(|alloc| alloc["ID"].as_str().map(str::to_owned))
                .collect();
            (ids.len() == count).then_some(ids)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_are_assigned_at_placement_and_the_api_shows_what_the_task_sees() {
    let cluster = Cluster::start(false).await;
    let mut job = shell_job(
        "ported",
        "echo port=$NOMAD_PORT_http ip=$NOMAD_IP_http; while :; do sleep 1; done",
    );
    job["TaskGroups"][0]["Count"] = json!(2);
    job["TaskGroups"][0]["Networks"] = json!([{
        "DynamicPorts": [{ "Label": "http", "To": -1 }],
    }]);
    let (status, body) = cluster
        .send("POST", "/v1/jobs", Some(&json!({ "Job": job })))
        .await;
    assert_eq!(status, 200, "{body}");
    let ids = running_allocs(&cluster, "ported", 2).await;
    let mut ports = BTreeSet::new();
    for alloc_id in &ids {
        let alloc = cluster.alloc(alloc_id).await;
        let shared = &alloc["AllocatedResources"]["Shared"];
        let port = shared["Ports"][0]["Value"].as_i64().expect("a port value");
        assert!((20_000..=32_000).contains(&port), "{shared}");
        assert_eq!(shared["Ports"][0]["Label"], "http");
        assert_eq!(shared["Ports"][0]["To"], port);
        let ip = shared["Ports"][0]["HostIP"].as_str().expect("a host IP");
        assert_eq!(shared["Networks"][0]["DynamicPorts"][0]["Value"], port);
        assert_eq!(shared["Networks"][0]["IP"], ip);
        let expected = format!("port={port} ip={ip}");
        cluster
            .poll("the task's environment printed", || async {
                plain_log(&cluster, alloc_id)
                    .await
                    .contains(&expected)
                    .then_some(())
            })
            .await;
        assert!(ports.insert(port), "port {port} given twice on one node");
    }

    // A static port only one allocation on the node can have: the second finds no node.
    let mut fixed = shell_job("fixed", "while :; do sleep 1; done");
    fixed["TaskGroups"][0]["Count"] = json!(2);
    fixed["TaskGroups"][0]["Networks"] = json!([{
        "ReservedPorts": [{ "Label": "admin", "Value": 31_999 }],
    }]);
    let (status, body) = cluster
        .send("POST", "/v1/jobs", Some(&json!({ "Job": fixed })))
        .await;
    assert_eq!(status, 200, "{body}");
    running_allocs(&cluster, "fixed", 1).await;
    let failed = cluster
        .poll("the placement failure", || async {
            let (_, evals) = cluster.get("/v1/job/fixed/evaluations").await;
            evals.as_array()?.iter().find_map(|eval| {
                let failed = &eval["FailedTGAllocs"]["g"];
                failed.is_object().then(|| failed.clone())
            })
        })
        .await;
    assert_eq!(
        failed["DimensionExhausted"]["network: reserved port collision admin=31999"], 1,
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_streams_in_frames_and_follows_what_is_appended() {
    let cluster = Cluster::start(false).await;
    let script = "echo first > $NOMAD_TASK_DIR/out.txt; echo ready; \
                  sleep 1; echo second >> $NOMAD_TASK_DIR/out.txt; while :; do sleep 1; done";
    let alloc_id = cluster.run_job(shell_job("streamer", script)).await;
    cluster
        .poll("the file written", || async {
            plain_log(&cluster, &alloc_id)
                .await
                .contains("ready")
                .then_some(())
        })
        .await;
    let base = format!("/v1/client/fs/stream/{alloc_id}?path=t/local/out.txt");

    // Not followed: the frames of what is there, then the end.
    let (status, body) = cluster
        .send("GET", &format!("{base}&follow=false&offset=0"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let frame: Value = serde_json::Deserializer::from_str(&body)
        .into_iter::<Value>()
        .next()
        .expect("a frame")
        .expect("JSON");
    assert_eq!(frame["File"], "t/local/out.txt");
    let data = base64::engine::general_purpose::STANDARD
        .decode(frame["Data"].as_str().expect("data"))
        .expect("base64");
    assert!(data.starts_with(b"first\n"), "{body}");
    assert_eq!(frame["Offset"].as_u64(), Some(data.len() as u64));

    // From the end, followed (the default): the appended line arrives.
    let mut response = cluster
        .http
        .get(cluster.url(&format!("{base}&origin=end&offset=6")))
        .send()
        .await
        .expect("the stream");
    assert_eq!(response.status(), 200);
    let mut seen = Vec::new();
    let started = std::time::Instant::now();
    while !String::from_utf8_lossy(&seen).contains("second") {
        assert!(started.elapsed() < Duration::from_secs(20), "{seen:?}");
        let chunk = tokio::time::timeout(Duration::from_secs(15), response.chunk())
            .await
            .expect("a frame within 15 s")
            .expect("the stream")
            .expect("the stream goes on");
        for frame in serde_json::Deserializer::from_slice(&chunk).into_iter::<Value>() {
            let frame = frame.expect("whole frames");
            if let Some(data) = frame["Data"].as_str() {
                seen.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .expect("base64"),
                );
            }
        }
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("first\n"));
    drop(response);

    for (query, status, text) in [
        (String::new(), 400, "must provide a file name"),
        ("path=t/local".to_owned(), 400, "is a directory"),
        ("path=t/local/missing".to_owned(), 400, "No such file"),
        (
            "path=../x".to_owned(),
            400,
            "Path escapes the alloc directory",
        ),
        (
            "path=t/local/out.txt&origin=middle".to_owned(),
            400,
            "origin must be start or end",
        ),
        (
            "path=t/local/out.txt&follow=maybe".to_owned(),
            400,
            "failed to parse follow field",
        ),
    ] {
        let (got, body) = cluster
            .send(
                "GET",
                &format!("/v1/client/fs/stream/{alloc_id}?{query}"),
                None,
            )
            .await;
        assert_eq!(got, status, "{query}: {body}");
        assert!(body.contains(text), "{query}: {body:?} lacks {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocation_and_host_stats_read_the_tasks_processes_and_the_host() {
    let cluster = Cluster::start(false).await;
    // A task holding some memory in a child process.
    let script = "x=$(head -c 4000000 /dev/zero | tr '\\0' a); echo ready; sleep 600";
    let alloc_id = cluster.run_job(shell_job("measured", script)).await;
    cluster
        .poll("the task ready", || async {
            plain_log(&cluster, &alloc_id)
                .await
                .contains("ready")
                .then_some(())
        })
        .await;
    let (status, stats) = cluster
        .get(&format!("/v1/client/allocation/{alloc_id}/stats"))
        .await;
    assert_eq!(status, 200, "{stats}");
    let task = &stats["Tasks"]["t"]["ResourceUsage"];
    assert!(
        task["MemoryStats"]["RSS"].as_u64().unwrap_or(0) > 1_000_000,
        "{stats}"
    );
    assert_eq!(task["MemoryStats"]["Measured"], json!(["RSS", "Swap"]));
    assert!(task["CpuStats"]["Percent"].as_f64().is_some(), "{stats}");
    assert_eq!(
        stats["ResourceUsage"]["MemoryStats"]["RSS"],
        task["MemoryStats"]["RSS"]
    );
    assert!(stats["Timestamp"].as_i64().unwrap_or(0) > 0);
    let (status, body) = cluster
        .send(
            "GET",
            &format!("/v1/client/allocation/{alloc_id}/stats?task=nope"),
            None,
        )
        .await;
    assert_eq!(status, 400, "{body}");

    let (status, host) = cluster.get("/v1/client/stats").await;
    assert_eq!(status, 200, "{host}");
    assert!(host["Memory"]["Total"].as_u64().unwrap_or(0) > 0, "{host}");
    assert!(!host["CPU"].as_array().expect("CPUs").is_empty());
    assert!(host["Uptime"].as_u64().unwrap_or(0) > 0);
    assert!(
        host["AllocDirStats"]["Size"].as_u64().unwrap_or(0) > 0,
        "{host}"
    );
    let (status, body) = cluster
        .send("GET", "/v1/client/stats?node_id=nope", None)
        .await;
    assert_eq!((status, body.trim_end()), (404, "Unknown node \"nope\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_a_terminal_allocations_directory_and_refuses_a_live_one() {
    let cluster = Cluster::start(false).await;
    let alloc_id = cluster
        .run_job(shell_job("collected", "echo hello; sleep 600"))
        .await;
    let (status, body) = cluster
        .send("GET", &format!("/v1/client/allocation/{alloc_id}/gc"), None)
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not eligible for GC"), "{body}");
    let (status, _) = cluster
        .send("GET", &format!("/v1/client/fs/ls/{alloc_id}?path=/"), None)
        .await;
    assert_eq!(status, 200);

    let (status, body) = cluster.send("DELETE", "/v1/job/collected", None).await;
    assert_eq!(status, 200, "{body}");
    cluster
        .poll("the allocation complete", || async {
            (cluster.alloc(&alloc_id).await["ClientStatus"] == "complete").then_some(())
        })
        .await;
    cluster
        .poll("the allocation collected", || async {
            let (status, _) = cluster
                .send("GET", &format!("/v1/client/allocation/{alloc_id}/gc"), None)
                .await;
            (status == 200).then_some(())
        })
        .await;
    let (status, body) = cluster
        .send("GET", &format!("/v1/client/fs/ls/{alloc_id}?path=/"), None)
        .await;
    assert_eq!(status, 404, "the directory is gone: {body}");
    // Collected already: unknown on the client.
    let (status, _) = cluster
        .send("GET", &format!("/v1/client/allocation/{alloc_id}/gc"), None)
        .await;
    assert_eq!(status, 404);
    let (status, body) = cluster.send("PUT", "/v1/client/gc", None).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_file_reports_truncation_and_deletion() {
    let cluster = Cluster::start(false).await;
    // Each change waits for a signal the test sends, so no change races the stream. The
    // rewritten file is shorter than the stream's offset, which is how truncation shows.
    let script = "cd $NOMAD_TASK_DIR; echo one > f; \
                  trap ': > f; echo 2 >> f' USR1; trap 'rm f' USR2; \
                  echo ready; while :; do sleep 0.1; done";
    let alloc_id = cluster.run_job(shell_job("truncated", script)).await;
    cluster
        .poll("the file written", || async {
            plain_log(&cluster, &alloc_id)
                .await
                .contains("ready")
                .then_some(())
        })
        .await;
    let mut response = cluster
        .http
        .get(cluster.url(&format!("/v1/client/fs/stream/{alloc_id}?path=t/local/f")))
        .send()
        .await
        .expect("the stream");
    assert_eq!(response.status(), 200);
    let signal = |name: &'static str| {
        let path = format!("/v1/client/allocation/{alloc_id}/signal");
        let cluster = &cluster;
        async move {
            let body = json!({ "Signal": name, "Task": "t" });
            let (status, text) = cluster.send("POST", &path, Some(&body)).await;
            assert_eq!(status, 200, "{text}");
        }
    };
    let mut frames: Vec<Value> = Vec::new();
    let mut sent = 0;
    let started = std::time::Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(30), "{frames:?}");
        let chunk = tokio::time::timeout(Duration::from_secs(15), response.chunk())
            .await
            .expect("a frame within 15 s")
            .expect("the stream");
        let Some(chunk) = chunk else { break };
        for frame in serde_json::Deserializer::from_slice(&chunk).into_iter::<Value>() {
            frames.push(frame.expect("whole frames"));
        }
        let truncated = frames.iter().any(|f| f["FileEvent"] == "file truncated");
        // Truncate once "one" was seen, delete once the truncation was.
        if sent == 0 && !frames.is_empty() {
            sent = 1;
            signal("SIGUSR1").await;
        } else if sent == 1 && truncated {
            sent = 2;
            signal("SIGUSR2").await;
        }
    }
    let events: Vec<&str> = frames
        .iter()
        .filter_map(|frame| frame["FileEvent"].as_str())
        .collect();
    assert_eq!(events, vec!["file truncated", "file deleted"], "{frames:?}");
    let truncated = frames
        .iter()
        .position(|frame| frame["FileEvent"] == "file truncated")
        .expect("the truncation");
    let after: Vec<u8> = frames[truncated..]
        .iter()
        .filter_map(|frame| frame["Data"].as_str())
        .flat_map(|data| {
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .expect("base64")
        })
        .collect();
    assert_eq!(after, b"2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_gc_follow_the_acl_rules() {
    let mut cluster = Cluster::start(true).await;
    let alloc_id = cluster.run_job(shell_job("guarded", "sleep 600")).await;
    let reader = cluster
        .token_with("reader", r#"namespace "default" { policy = "read" }"#)
        .await;
    let node_reader = cluster
        .token_with("node-reader", r#"node { policy = "read" }"#)
        .await;
    let stats = format!("/v1/client/allocation/{alloc_id}/stats");
    let gc = format!("/v1/client/allocation/{alloc_id}/gc");
    cluster.token = Some(reader);
    assert_eq!(cluster.send("GET", &stats, None).await.0, 200);
    assert_eq!(cluster.send("GET", &gc, None).await.0, 403);
    assert_eq!(cluster.send("GET", "/v1/client/stats", None).await.0, 403);
    assert_eq!(cluster.send("GET", "/v1/client/gc", None).await.0, 403);
    cluster.token = Some(node_reader);
    assert_eq!(cluster.send("GET", &stats, None).await.0, 403);
    assert_eq!(cluster.send("GET", "/v1/client/stats", None).await.0, 200);
    assert_eq!(cluster.send("GET", "/v1/client/gc", None).await.0, 403);
    cluster.token = None;
    assert_eq!(cluster.send("GET", "/v1/client/stats", None).await.0, 403);
}
