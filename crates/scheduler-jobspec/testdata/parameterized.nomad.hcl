job "dispatch-me" {
  type = "batch"

  parameterized {
    payload       = "required"
    meta_required = ["customer"]
    meta_optional = ["priority"]
  }

  group "work" {
    task "process" {
      driver = "docker"

      config {
        image   = "worker:latest"
        command = "process"
        args    = ["${NOMAD_META_customer}", "local/payload.json"]
      }

      dispatch_payload {
        file = "payload.json"
      }
    }
  }
}
