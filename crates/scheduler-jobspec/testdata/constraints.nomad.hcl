job "placement" {
  datacenters = ["dc1"]

  constraint {
    distinct_hosts = true
  }
  constraint {
    distinct_property = "${meta.rack}"
  }
  constraint {
    attribute = "${attr.os.name}"
    regexp    = "^(ubuntu|debian)$"
  }
  constraint {
    attribute = "${attr.nomad.version}"
    version   = ">= 1.6.0"
  }
  constraint {
    attribute = "${attr.kernel.version}"
    semver    = ">= 5.0.0"
  }
  constraint {
    attribute    = "${meta.tags}"
    set_contains = "ssd"
  }
  constraint {
    attribute        = "${meta.zones}"
    set_contains_any = "a,b"
  }
  constraint {
    attribute        = "${meta.features}"
    set_contains_all = "x,y"
  }
  constraint {
    attribute = "${meta.gpu}"
    is_set    = true
  }
  constraint {
    attribute  = "${meta.spot}"
    is_not_set = true
  }
  constraint {
    attribute = "${node.class}"
    operator  = "!="
    value     = "tiny"
  }

  affinity {
    attribute = "${node.datacenter}"
    value     = "dc1"
    weight    = -20
  }
  affinity {
    attribute = "${meta.env}"
    value     = "prod"
  }

  spread {
    attribute = "${node.datacenter}"
    weight    = 70
    target "dc1" {
      percent = 60
    }
    target "dc2" {
      percent = 40
    }
  }

  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "sleep"
        args    = ["1000"]
      }
    }
  }
}
