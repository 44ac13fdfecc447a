# syntax=docker/dockerfile:1
#
# The cacheagent daemon's image: the one deploy/kubernetes runs as a
# DaemonSet (kustomization.yaml's images: entry points the DaemonSet's image
# "cacheagent" at it). Built from the root of this repository:
#
#   docker build -t REGISTRY/cacheagent:VERSION .
#   docker push REGISTRY/cacheagent:VERSION
#   (cd deploy/kubernetes && kustomize edit set image cacheagent=REGISTRY/cacheagent:VERSION)
#   kubectl apply -k deploy/kubernetes -n cacheagent
#
# For arm64 GPU nodes too (GH200): docker buildx build --platform
# linux/amd64,linux/arm64 -t REGISTRY/cacheagent:VERSION --push . (the Go
# build cross-compiles; nothing runs under emulation). It holds the daemon
# only, ./cmd/cacheagent, not cacheagent-bench (the demo and benchmarks).
# deploy/kubernetes/manifests_test.go checks this file against the manifests.

# The Go of go.mod's go line (1.26.0).
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# Built as scripts/install.sh builds it (CGO_ENABLED=0, -trimpath), plus
# the nocuda tag: the CUDA binding (gpu/cuda, purego) links glibc
# dynamically, and the daemon never touches a GPU, so the image's binary is
# left without it and is static (file(1): "statically linked"). There is no
# version variable to set with -ldflags: `cacheagent version` (and the
# version the fleet and cacheagent_build_info report) is the module version
# in the Go build info, "(devel)" for a build from a source tree;
# -buildvcs=false because .git is not in the build context (.dockerignore).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -tags nocuda -trimpath -buildvcs=false -o /out/cacheagent ./cmd/cacheagent

# distroless/static (CA certificates for GCS, tzdata, /etc/passwd; no libc,
# no shell, no package manager), as root: the ":latest" variant, not
# ":nonroot". The DaemonSet runs the agent privileged and as the image's
# user: as root it mounts FUSE itself (the image has no fusermount3, and a
# non-root user in a privileged container gets no capabilities), writes the
# root-owned hostPaths (the NVMe cache dir, /dev/shm/cacheagent,
# /run/cacheagent) and owns the control socket, as the systemd unit runs it
# (root, group cacheagent).
#
# GPUs: `cacheagent serve` does not touch the GPU (the config's gpu key is
# only validated); in this image `cacheagent gpu info` says the build has no
# CUDA binding and reads the GPUs' NUMA node and CPUs from sysfs (NVML needs
# cgo). Training jobs use the GPU feed from their own process.
FROM gcr.io/distroless/static-debian12:latest
COPY --from=build /out/cacheagent /usr/local/bin/cacheagent
USER 0:0
# On the image's PATH, so `kubectl exec daemonset/cacheagent -- cacheagent
# fleet status` finds it.
ENTRYPOINT ["/usr/local/bin/cacheagent"]
# What the DaemonSet's args say too: the ConfigMap cacheagent-config is
# mounted at /etc/cacheagent/config.
CMD ["serve", "--config", "/etc/cacheagent/config/cacheagent.yaml"]
