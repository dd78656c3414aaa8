# A system job: job-level vault, a top-level task, identities, actions and a schedule.
job "node-agent" {
  type = "system"

  vault {
    policies = ["metrics"]
  }

  task "collector" {
    driver = "raw_exec"
    config {
      command = "/usr/bin/collector"
      args    = ["--node", "${node.unique.name}"]
    }
  }

  group "agents" {
    disconnect {
      lost_after = "1h"
      replace    = false
    }

    task "agent" {
      driver = "exec"

      config {
        command = "/usr/bin/agent"
      }

      vault {
        role = "agent"
      }

      identity {
        env  = true
        file = true
      }

      identity {
        name = "vault_default"
        aud  = ["vault.io"]
        ttl  = "1h"
      }

      action "flush" {
        command = "/bin/flush"
        args    = ["-now"]
      }

      schedule {
        cron {
          start    = "0 8 * * *"
          end      = "0 18"
          timezone = "UTC"
        }
      }

      scaling "cpu" {
        max = 500
        policy {
          cooldown = "5m"
        }
      }
    }
  }
}
