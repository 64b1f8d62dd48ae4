#!/usr/bin/env bash
# A single-node Kubernetes cluster on loopback, for proctor's kubernetes
# backend tests and for a user's first try, built offline:
#
#   scripts/k8s.sh build   build the binaries once into the cache (by version)
#   scripts/k8s.sh up      start etcd, apiserver, scheduler, containerd, kubelet
#   scripts/k8s.sh down    stop them; leave no processes, mounts or cgroups
#   scripts/k8s.sh clean   down, then remove the cluster's state folder
#   scripts/k8s.sh env     print the export line for KUBECONFIG
#   scripts/k8s.sh import IMAGE...   copy local Docker images into the cluster
#
# The binaries come from the Go module proxy (k8s.io/kubernetes, etcd, the
# CNI loopback plugin); containerd and runc are Debian's. containerd runs as
# a second instance with its own root, state and socket: dockerd's is never
# touched. The kubelet runs in its own mount namespace where the kernel
# settings it would rewrite are small files, so the machine's stay as they are.
set -euo pipefail

K8S_VERSION=${PROCTOR_K8S_VERSION:-v1.37.2}
ETCD_VERSION=${PROCTOR_ETCD_VERSION:-v3.7.3}
CNI_VERSION=${PROCTOR_CNI_VERSION:-v1.9.1}
CACHE=${PROCTOR_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proctor/k8s}/$K8S_VERSION
BIN=$CACHE/bin
STATE=${PROCTOR_K8S_STATE:-/var/lib/proctor-k8s}
NODE=${PROCTOR_K8S_NODE:-$(hostname)}
APISERVER_PORT=${PROCTOR_K8S_PORT:-16443}
REGISTRY_PORT=${PROCTOR_K8S_REGISTRY_PORT:-5001}
IMAGES=${PROCTOR_K8S_IMAGES:-proctor-base:bookworm}

log() { echo "k8s: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------- build

ldflags() {
  local v=$K8S_VERSION minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  local f="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    f+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

# build_kube builds kube-apiserver, kubelet, kube-scheduler and kubectl in a
# wrapper module: kubernetes' own go.mod names its staging modules v0.0.0
# (replaced by folders that the module zip lacks), so the wrapper replaces
# each with the published v0.MINOR.PATCH; each main is upstream's main file.
build_kube() {
  local src=$CACHE/src/kube staging=v0.${K8S_VERSION#v1.}
  rm -rf "$src" && mkdir -p "$src"
  local up
  up=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$up" ] || die "k8s.io/kubernetes@$K8S_VERSION not in the module cache"
  {
    echo "module proctor.local/k8sbuild"
    echo
    grep -E '^go ' "$up/go.mod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    grep -E '^\s+k8s\.io/[a-z-]+ v0\.0\.0$' "$up/go.mod" | awk -v s="$staging" '{print "\t" $1 " => " $1 " " s}'
    echo ")"
  } >"$src/go.mod"
  local c
  for c in kube-apiserver:apiserver.go kubelet:kubelet.go kube-scheduler:scheduler.go kubectl:kubectl.go; do
    mkdir -p "$src/${c%%:*}"
    cp "$up/cmd/${c%%:*}/${c#*:}" "$src/${c%%:*}/main.go"
    chmod u+w "$src/${c%%:*}/main.go"
  done
  (cd "$src" && go mod tidy >/dev/null 2>&1 || go mod tidy)
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "$(ldflags)" -o "$BIN/" ./kube-apiserver ./kubelet ./kube-scheduler ./kubectl)
}

build_etcd() {
  local src=$CACHE/src/etcd
  rm -rf "$src" && mkdir -p "$src"
  cat >"$src/go.mod" <<EOF
module proctor.local/etcdbuild

go 1.25

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
  cat >"$src/main.go" <<'EOF'
// Command etcd is etcd's server main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  (cd "$src" && go mod tidy >/dev/null 2>&1 || go mod tidy)
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .)
}

build_cni() {
  local src=$CACHE/src/cni
  rm -rf "$src" && mkdir -p "$src"
  (cd "$src" && CGO_ENABLED=0 GOBIN="$BIN/cni" go install -trimpath -ldflags "-s -w" \
    "github.com/containernetworking/plugins/plugins/main/loopback@$CNI_VERSION")
}

# build_local builds the small programs whose source is in this
# repository (scripts/k8s): the pod sandbox's pause process, the CNI
# plugin that gives pods no network, and the printer of the seccomp
# profile isolated sandboxes ask for. Each is rebuilt when a source it is
# made from is newer than the binary.
build_local() {
  local root b src
  root=$(cd "$(dirname "$0")/.." && pwd)
  mkdir -p "$BIN/cni"
  for b in pause nonet seccomp; do
    local out=$BIN/$b
    [ $b = nonet ] && out=$BIN/cni/nonet
    local stale=0
    [ -x "$out" ] || stale=1
    for src in "$root/scripts/k8s/$b/main.go" $([ $b = seccomp ] && echo "$root"/sandbox/seccomp/*.go "$root/sandbox/sandbox.go"); do
      [ "$src" -nt "$out" ] && stale=1
    done
    if [ $stale = 1 ]; then
      (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out" "./scripts/k8s/$b")
    fi
  done
}

cmd_build() {
  mkdir -p "$BIN"
  # The lock is held by a subshell only: daemons started later must not
  # inherit it.
  (
    flock 9
    build_all
  ) 9>"$CACHE/.build.lock"
}

build_all() {
  local want=(kube-apiserver kubelet kube-scheduler kubectl etcd cni/loopback) missing=0 b
  for b in "${want[@]}"; do [ -x "$BIN/$b" ] || missing=1; done
  if [ $missing = 0 ]; then
    build_local
    return 0
  fi
  command -v go >/dev/null || die "go is needed to build the binaries"
  local t0=$SECONDS
  log "building Kubernetes $K8S_VERSION into $BIN (cold: 10-17 min on 2 cores)"
  [ -x "$BIN/cni/loopback" ] || build_cni
  [ -x "$BIN/etcd" ] || build_etcd
  for b in kube-apiserver kubelet kube-scheduler kubectl; do
    [ -x "$BIN/$b" ] || { build_kube; break; }
  done
  build_local
  rm -rf "$CACHE/src"
  log "built in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- up

PKI=$STATE/pki
RUN=${PROCTOR_K8S_RUN:-/run/proctor-k8s}
SOCK=$RUN/containerd.sock
ETCD_PORT=${PROCTOR_K8S_ETCD_PORT:-12379}
KUBELET_PORT=10250
CGROUP=proctor-k8s
NAMESPACE=${PROCTOR_K8S_NAMESPACE:-proctor}
PAUSE_IMAGE=proctor.local/pause:1

need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root (containerd and the kubelet run as root)"; }
alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
kctl() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
ctr_() { ctr --address "$SOCK" -n k8s.io "$@"; }

# cert NAME CN [O] [SAN]: a key and a certificate signed by the cluster's CA.
cert() {
  local name=$1 o=${3:-} san=${4:-} subj="/CN=$2"
  [ -f "$PKI/$name.crt" ] && return 0
  [ -n "$o" ] && subj="/O=$o$subj"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# kubeconfig FILE USER CERT [NAMESPACE]
kubeconfig() {
  local ns=${4:-default}
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: proctor-k8s
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$3.crt")
    client-key-data: $(base64 -w0 <"$PKI/$3.key")
contexts:
- name: proctor-k8s
  context:
    cluster: proctor-k8s
    user: $2
    namespace: $ns
current-context: proctor-k8s
EOF
  chmod 600 "$1"
}

pki() {
  mkdir -p "$PKI" && chmod 700 "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=proctor-k8s-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  cert apiserver kube-apiserver "" \
    "DNS:localhost,DNS:$NODE,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert admin proctor-admin system:masters
  cert proctor proctor
  cert scheduler system:kube-scheduler
  cert kubelet-client "system:node:$NODE" system:nodes
  cert kubelet "$NODE" "" "DNS:$NODE,DNS:localhost,IP:127.0.0.1"
  if [ ! -f "$PKI/sa.key" ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/sa.key" 2>/dev/null
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  kubeconfig "$STATE/admin.kubeconfig" proctor-admin admin "$NAMESPACE"
  kubeconfig "$STATE/proctor.kubeconfig" proctor proctor "$NAMESPACE"
  kubeconfig "$STATE/scheduler.kubeconfig" system:kube-scheduler scheduler
  kubeconfig "$STATE/kubelet.kubeconfig" "system:node:$NODE" kubelet-client
}

# start NAME CMD...: a daemon in its own session, logging to $STATE/logs.
start() {
  local name=$1
  shift
  if alive "$name"; then
    return 0
  fi
  setsid "$@" >>"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}

# wait_for WHAT SECONDS CMD...: run CMD until it succeeds.
wait_for() {
  local what=$1 end=$((SECONDS + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "$what not ready after $2 s; see $STATE/logs"
    sleep 0.1
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

containerd_config() {
  mkdir -p "$STATE/cni" "$STATE/certs.d"
  cat >"$STATE/cni/10-proctor.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "proctor-nonet", "plugins": [{"type": "nonet"}]}
EOF
  cat >"$STATE/containerd.toml" <<EOF
# A second containerd for the local cluster: its own root, state and
# socket, never the Docker engine's.
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$SOCK"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE here: runc cannot lower a container's oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$BIN/cni"
    conf_dir = "$STATE/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$STATE/certs.d"
EOF
}

kubelet_config() {
  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: AlwaysAllow}
tlsCertFile: "$PKI/kubelet.crt"
tlsPrivateKeyFile: "$PKI/kubelet.key"
containerRuntimeEndpoint: "unix://$SOCK"
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
failCgroupV1: false
failSwapOn: false
podPidsLimit: 1024
maxPods: 250
podLogsDir: "$STATE/pod-logs"
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
staticPodPath: ""
EOF
}

# Kernel settings the kubelet rewrites on start, with the values it wants:
# inside its own mount namespace each is a small file bind-mounted over the
# /proc/sys entry, so the machine's settings stay as they are.
SYSCTLS="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"

# SECCOMP is the Localhost seccomp profile isolated sandboxes ask for
# ([sandbox.kubernetes] seccomp_profile's default), in the kubelet's
# seccomp folder; up writes it each time, so it follows the source.
SECCOMP=proctor-isolated.json

start_kubelet() {
  mkdir -p "$STATE/kubelet/seccomp"
  "$BIN/seccomp" >"$STATE/kubelet/seccomp/$SECCOMP.new" && mv -f "$STATE/kubelet/seccomp/$SECCOMP.new" "$STATE/kubelet/seccomp/$SECCOMP"
  alive kubelet && return 0
  mkdir -p "$STATE/kubelet" "$STATE/pod-logs" "$RUN/sysctl"
  # The kubelet's root is a shared mount, so what it mounts there from its
  # own namespace (volumes) is seen by containerd.
  if ! mountpoint -q "$STATE/kubelet"; then
    mount --bind "$STATE/kubelet" "$STATE/kubelet"
    mount --make-shared "$STATE/kubelet"
  fi
  # The kubelet's cgroup root, in every hierarchy (cgroup v1 here, or v2):
  # its pods' cgroups go below it, and down removes it whole.
  local h
  for h in $(awk '$9 == "cgroup" || $9 == "cgroup2" {print $5}' /proc/self/mountinfo); do
    case $h in /sys/fs/cgroup*) ;; *) continue ;; esac
    [ -d "$h/$CGROUP" ] && continue
    mkdir "$h/$CGROUP"
    if [ -f "$h/cpuset.cpus" ] && [ -f "$h/$CGROUP/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h/$CGROUP/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$CGROUP/cpuset.mems"
    fi
  done
  local binds="" kv key file
  for kv in $SYSCTLS; do
    key=${kv%%=*}
    [ -e "/proc/sys/$key" ] || continue
    file=$RUN/sysctl/${key//\//.}
    echo "${kv#*=}" >"$file"
    binds+="mount --bind '$file' '/proc/sys/$key' && "
  done
  # Device plugins and container log links have fixed paths: remember
  # which of them this cluster made, so down removes only those.
  [ -e /var/lib/kubelet ] || touch "$RUN/made-var-lib-kubelet"
  [ -e /var/log/containers ] || touch "$RUN/made-var-log-containers"
  # PATH without /usr/sbin: no iptables, so the kubelet leaves the
  # machine's firewall rules alone (it has nothing to do there: no
  # kube-proxy, no pod network).
  start kubelet unshare --mount --propagation unchanged -- bash -c "
    mount --make-rprivate /proc && $binds
    exec env PATH=/usr/local/bin:/usr/bin:/bin '$BIN/kubelet' --config '$STATE/kubelet.yaml' \
      --kubeconfig '$STATE/kubelet.kubeconfig' --root-dir '$STATE/kubelet' \
      --hostname-override '$NODE' --v=1"
}

# start_registry runs a registry on loopback for images built from a
# task's context (Debian's docker-registry, when installed). The runtime
# pulls from a loopback registry over plain HTTP.
start_registry() {
  command -v docker-registry >/dev/null || {
    log "no docker-registry: tasks built from a context need a registry (make test-tools, or apt-get install docker-registry)"
    return 0
  }
  cat >"$STATE/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $STATE/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
EOF
  start registry docker-registry serve "$STATE/registry.yml"
  wait_for registry 30 port_open "$REGISTRY_PORT"
}

# cgroup_dirs lists the cluster's cgroup folders, deepest first.
cgroup_dirs() {
  local c
  for c in /sys/fs/cgroup/"$CGROUP" /sys/fs/cgroup/*/"$CGROUP"; do
    [ -d "$c" ] && find "$c" -depth -type d
  done
  return 0
}

# pause_image packs the pause binary as a docker-archive image by hand
# (config, manifest, one layer), so the cluster needs no registry.
pause_image() {
  if ctr_ images ls -q 2>/dev/null | grep -qx "$PAUSE_IMAGE"; then
    return 0
  fi
  local d diff cfg
  d=$(mktemp -d)
  mkdir "$d/root"
  cp "$BIN/pause" "$d/root/pause"
  tar -C "$d/root" --owner=0 --group=0 --numeric-owner -cf "$d/layer.tar" pause
  diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$diff" >"$d/config.json"
  cfg=$(sha256sum "$d/config.json" | cut -d' ' -f1)
  mv "$d/config.json" "$d/$cfg.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$cfg" "$PAUSE_IMAGE" >"$d/manifest.json"
  tar -C "$d" -cf "$d/image.tar" manifest.json "$cfg.json" layer.tar
  ctr_ images import "$d/image.tar" >/dev/null
  rm -rf "$d"
}

# cmd_import copies local Docker images into the cluster's containerd,
# skipping those already there with the same id.
cmd_import() {
  need_root import
  alive containerd || die "the cluster is not up; run $0 up"
  local img id stamp
  mkdir -p "$STATE/imported"
  for img in "$@"; do
    id=$(docker image inspect --format '{{.Id}}' "$img" 2>/dev/null) || {
      log "image $img not in the Docker engine; skipped"
      continue
    }
    stamp=$STATE/imported/$(echo "$img" | tr '/:' '__')
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$id" ]; then
      continue
    fi
    log "importing $img"
    docker save "$img" | ctr_ images import - >/dev/null
    echo "$id" >"$stamp"
  done
}

rbac() {
  kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $NAMESPACE
  labels:
    # Isolated sandboxes hold CAP_SYS_ADMIN for the warden, which
    # "baseline" forbids (docs/kubernetes.md).
    pod-security.kubernetes.io/enforce: privileged
---
# What proctor needs, and no more (docs/kubernetes.md).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: proctor
  namespace: $NAMESPACE
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, delete]
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [create, get]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: proctor
  namespace: $NAMESPACE
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: proctor
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: proctor
EOF
}

cmd_up() {
  need_root up
  local need=() c
  for c in containerd:containerd runc:runc openssl:openssl unshare:util-linux ctr:containerd; do
    command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null ||
      die "install ${need[*]} (Debian packages) and run again"
  fi
  cmd_build
  local t0=$SECONDS
  mkdir -p "$STATE/logs" "$RUN"
  pki
  containerd_config
  kubelet_config

  start etcd "$BIN/etcd" --name proctor --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "proctor=http://127.0.0.1:$((ETCD_PORT + 1))" --log-level warn
  start containerd containerd --config "$STATE/containerd.toml"
  wait_for etcd 30 port_open "$ETCD_PORT"
  start apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types Hostname \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/24 \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --disable-admission-plugins ServiceAccount,TaintNodesByCondition \
    --endpoint-reconciler-type none --profiling=false
  wait_for containerd 30 test -S "$SOCK"
  pause_image
  wait_for apiserver 60 kctl get --raw /readyz
  start scheduler "$BIN/kube-scheduler" --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --profiling=false
  start_kubelet
  start_registry
  rbac
  wait_for "node $NODE" 60 kctl wait --for=condition=Ready "node/$NODE" --timeout=1s
  log "node $NODE ready in $((SECONDS - t0)) s"
  # shellcheck disable=SC2086
  cmd_import $IMAGES
  log "up; use it with: export KUBECONFIG=$STATE/proctor.kubeconfig (namespace $NAMESPACE)"
  alive registry && log "images built from a task's context: [sandbox.kubernetes] registry = \"127.0.0.1:$REGISTRY_PORT/proctor\""
  return 0
}

# ---------------------------------------------------------------- down

# stop NAME [SECONDS]: TERM the daemon, KILL it after SECONDS.
stop() {
  local name=$1 secs=${2:-10} pid i
  [ -f "$RUN/$name.pid" ] || return 0
  pid=$(cat "$RUN/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$RUN/$name.pid"
}

# our_shims lists the pids of containerd shims this cluster's containerd
# started (they name its socket on their command line).
our_shims() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "-address $SOCK " && echo "${p#/proc/}"
  done
  return 0
}

cmd_down() {
  need_root down
  # Pods first, while the kubelet can still stop them.
  if alive apiserver && alive kubelet; then
    kctl delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  fi
  stop scheduler
  stop kubelet
  # Whatever the kubelet left running: kill and delete every task and
  # container through this containerd.
  if alive containerd; then
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_ containers ls -q 2>/dev/null); do
      ctr_ containers delete "$id" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  local pid
  for pid in $(our_shims); do kill -KILL "$pid" 2>/dev/null || true; done
  stop apiserver
  stop etcd
  stop registry
  # Mounts under the cluster's folders (container roots, network
  # namespaces, the kubelet's shared root), deepest first.
  local m
  for m in $(awk -v a="$STATE" -v b="$RUN" '$5 == a || index($5, a "/") == 1 || $5 == b || index($5, b "/") == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
  done
  local d
  for d in $(cgroup_dirs); do rmdir "$d" 2>/dev/null || log "cannot remove cgroup $d"; done
  if [ -f "$RUN/made-var-lib-kubelet" ]; then
    rm -rf /var/lib/kubelet
  fi
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete
    if [ -f "$RUN/made-var-log-containers" ]; then rmdir /var/log/containers 2>/dev/null || true; fi
  fi
  rm -rf "$RUN"
  log "down"
}

cmd_clean() {
  cmd_down
  rm -rf "$STATE"
  log "removed $STATE (the binaries stay in $BIN; remove that folder to rebuild)"
}

cmd_status() {
  local n
  for n in etcd containerd apiserver scheduler kubelet registry; do
    if alive $n; then echo "$n running (pid $(cat "$RUN/$n.pid"))"; else echo "$n stopped"; fi
  done
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
clean) cmd_clean ;;
status) cmd_status ;;
env)
  echo "export KUBECONFIG=$STATE/proctor.kubeconfig"
  echo "export PROCTOR_K8S_ADMIN_KUBECONFIG=$STATE/admin.kubeconfig"
  ;;
import)
  shift
  cmd_import "$@"
  ;;
*) die "usage: $0 build|up|down|clean|status|env|import IMAGE..." ;;
esac
