# idemproxy in a container: a static binary on an empty image, run as a
# non-root user, with nothing else in it (no shell, no package manager).
#
#   docker build -t idemproxy .            # or podman/buildah: make image
#   docker run --rm -p 8080:8080 idemproxy --upstream http://api.internal:3000
#
# It listens on 0.0.0.0:8080 (clients) and 0.0.0.0:9100 (/metrics, /healthz and
# /readyz, no token); its HEALTHCHECK runs `idemproxy healthcheck`. The admin API (/readyz, /keys/) is off unless IDEMPROXY_ADMIN is
# set; see docs/proxy.md, "Running it as a service", for probes and configuration files.

# The build stage. GO_IMAGE is any image with Go 1.26 and a shell; make
# image-check passes one assembled from the host's Go when no registry answers.
ARG GO_IMAGE=golang:1.26
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY . .
# VERSION is what --version reports; empty, the binary reads it from the
# module's build info.
ARG VERSION=
# cmd/idemproxy is a module of its own: it builds on its go.mod, whose replace
# directives point at the other modules in the context (no workspace).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd cmd/idemproxy && CGO_ENABLED=0 GOWORK=off go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/idemproxy/idemproxy/proxy.Version=${VERSION}" \
      -o /out/idemproxy .

# The image: the binary and the CA certificates (for rediss://, postgres with
# TLS, https upstreams and AWS), nothing else.
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/idemproxy /idemproxy
# 65532 is distroless's "nonroot": no passwd entry is needed for a numeric user.
USER 65532:65532
ENV IDEMPROXY_LISTEN=0.0.0.0:8080 \
    IDEMPROXY_METRICS=0.0.0.0:9100
EXPOSE 8080 9100
# No shell in the image: the binary probes its own /readyz (on the metrics
# listener IDEMPROXY_METRICS names; exit 0 when the store answers).
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 CMD ["/idemproxy", "healthcheck"]
ENTRYPOINT ["/idemproxy"]
