# Sourced by build-image, up and down: picks the container engine and names the image.
#   ENGINE  podman (preferred, installed with apt-get when missing and run as root) or
#           docker (used when podman is missing and a docker daemon answers);
#           NIMBUS_ENGINE=podman|docker forces one.
#   IMAGE   the image's reference: storm-nimbus-ha:<version in pyproject.toml>, or
#           NIMBUS_IMAGE.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml")
IMAGE=${NIMBUS_IMAGE:-storm-nimbus-ha:$VERSION}

pick_engine() {
  ENGINE=${NIMBUS_ENGINE:-}
  if [ -z "$ENGINE" ]; then
    if command -v podman >/dev/null 2>&1; then
      ENGINE=podman
    elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
      ENGINE=docker
    else
      ENGINE=podman
    fi
  fi
  if [ "$ENGINE" = podman ]; then
    export CONTAINERS_CONF=${CONTAINERS_CONF:-$HERE/containers.conf}
    # podman names local images localhost/NAME
    case "$IMAGE" in */*) ;; *) IMAGE=localhost/$IMAGE ;; esac
  fi
}

# The replicas' readiness probe (deploy/kubernetes/nimbus-statefulset.yaml: gRPC health,
# the empty service name, port 6627), as a command run inside the container: what the
# kubelet asks, asked from the pod itself. Arguments: PORT SERVICE, and with TLS on, CA
# (a PEM file, or - for the system's roots) and NAME (the name the certificate gives).
GRPC_PROBE=(python3 -c "import sys, grpc
from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g
port, service, tls = sys.argv[1], sys.argv[2], sys.argv[3:]
target = '127.0.0.1:' + port
if tls:
    ca = None if tls[0] == '-' else open(tls[0], 'rb').read()
    options = [('grpc.ssl_target_name_override', tls[1])]
    channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(ca), options=options)
else:
    channel = grpc.insecure_channel(target)
with channel:
    got = g.HealthStub(channel).Check(h.HealthCheckRequest(service=service), timeout=1)
sys.exit(0 if got.status == h.HealthCheckResponse.SERVING else 1)")
