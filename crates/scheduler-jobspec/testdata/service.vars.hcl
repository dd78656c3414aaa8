image  = "nginx:1.25"
region = "eu"
