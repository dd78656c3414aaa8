job "report" {
  type        = "batch"
  datacenters = ["dc1", "dc2"]

  periodic {
    crons            = ["0 */6 * * *", "30 1 * * *"]
    prohibit_overlap = true
    time_zone        = "Europe/Paris"
  }

  reschedule {
    attempts  = 2
    interval  = "1h"
    unlimited = false
  }

  group "run" {
    restart {
      attempts = 1
      mode     = "fail"
    }

    task "report" {
      driver = "exec"
      config {
        command = "/usr/local/bin/report"
        args    = ["--date", "${NOMAD_META_date}"]
      }
      resources {
        cores  = 2
        memory = 1024
      }
    }
  }
}
