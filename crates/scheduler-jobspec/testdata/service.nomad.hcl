# A web service with variables, locals, two groups, templates, services and checks.
variable "datacenters" {
  type        = list(string)
  description = "Where to run"
  default     = ["dc1"]
}

variable "image" {
  type = string
}

variable "count" {
  type    = number
  default = 1
}

variable "region" {
  default = "global"
}

variable "enable_cache" {
  type    = bool
  default = false
}

locals {
  name        = "${local.prefix_name}-web"
  prefix_name = "demo"
  image_tag  = split(":", var.image)[1]
}

job "web" {
  datacenters = var.datacenters
  region      = var.region
  type        = "service"
  priority    = 60

  meta {
    owner   = "team-a"
    version = 3
  }

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  update {
    max_parallel     = 2
    min_healthy_time = "15s"
    healthy_deadline = "3m"
    auto_revert      = true
    canary           = 1
  }

  group "frontend" {
    count = var.count * 2

    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
      port "admin" {
        static = 9090
      }
    }

    service {
      name     = local.name
      port     = "http"
      tags     = ["web", "v${local.image_tag}"]
      provider = "nomad"

      check {
        name     = "alive"
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
        header {
          Authorization = ["Bearer x"]
        }
      }
    }

    restart {
      attempts = 5
      delay    = "25s"
    }

    ephemeral_disk {
      size = 500
    }

    task "server" {
      driver = "docker"

      config {
        image = var.image
        ports = ["http"]
        args  = ["--alloc", "${NOMAD_ALLOC_ID}", "--dc", "${node.datacenter}"]
        labels {
          team = "a"
        }
        logging = {
          type = "json-file"
        }
      }

      env {
        ALLOC   = "${NOMAD_ALLOC_ID}"
        NODE    = "${node.unique.id}"
        REGION  = var.region
        PORT    = 8080
        MIXED   = "${var.region}-${NOMAD_ALLOC_INDEX}"
      }

      template {
        destination = "local/app.conf"
        change_mode = "signal"
        change_signal = "SIGHUP"
        data        = <<-EOT
          alloc = {{ env "NOMAD_ALLOC_ID" }}
          region = ${var.region}
          kernel = ${attr.kernel.name}
        EOT
      }

      template {
        destination = "secrets/env"
        env         = true
        data        = <<EOT
KEY={{ key "app/key" }}
EOT
      }

      resources {
        cpu    = 500
        memory = 256
        memory_max = 512
      }

      kill_timeout = "20s"
      kill_signal  = "SIGTERM"
    }

    task "sidecar" {
      driver = "raw_exec"

      lifecycle {
        hook    = "prestart"
        sidecar = true
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo ${NOMAD_TASK_NAME}; sleep 3600"]
      }

      artifact {
        source      = "https://example.com/tool.tar.gz"
        destination = "local/tool"
        options {
          checksum = "sha256:abcd"
        }
      }

      logs {
        max_files     = 3
        max_file_size = 5
      }
    }
  }

  group "cache" {
    count = var.enable_cache ? 1 : 0

    task "redis" {
      driver = "docker"
      config {
        image = "redis:7"
      }
      service {
        name = "redis"
        port = 6379
        check {
          type     = "tcp"
          interval = "5s"
          timeout  = "1s"
        }
      }
    }
  }
}
