# Static binaries (the CCM and the inspect tool) on a distroless base, running as a non-root user.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
ARG TARGETOS=linux TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" \
      -o /out/ ./cmd/ironcore-cloud-controller-manager ./cmd/ironcore-ccm-inspect

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ironcore-cloud-controller-manager /out/ironcore-ccm-inspect /
USER 65532:65532
ENTRYPOINT ["/ironcore-cloud-controller-manager"]
