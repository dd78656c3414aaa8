# Consul Connect: a sidecar proxy with an upstream, a host volume and group scaling.
job "countdash" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode = "bridge"
    }

    volume "certs" {
      type      = "host"
      source    = "certs"
      read_only = true
    }

    scaling {
      min     = 1
      max     = 5
      enabled = true
      policy {
        cooldown = "1m"
      }
    }

    service {
      name = "count-api"
      port = "9001"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "count-db"
              local_bind_port  = 5432
            }
          }
        }

        sidecar_task {
          resources {
            cpu    = 50
            memory = 64
          }
        }
      }
    }

    task "web" {
      driver = "docker"

      config {
        image = "hashicorpdev/counter-api:v3"
      }

      volume_mount {
        volume      = "certs"
        destination = "/etc/certs"
      }
    }
  }
}
