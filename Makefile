# Tool versions are pinned here and only here.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: modules ## Run the demo: local Kubernetes and IronCore control planes, the CCM at work, a report.
	@go run ./cmd/ironcore-ccm-lab demo

.PHONY: lab
lab: modules ## Like demo, then keep everything running for kubectl until Ctrl-C.
	@go run ./cmd/ironcore-ccm-lab lab

.PHONY: bench
bench: modules ## Measure the CCM at scale (BENCH_FLAGS, default 100 Nodes, 30 Services); results in docs/benchmarks/.
	@go run ./cmd/ironcore-ccm-lab $(BENCH_FLAGS) bench

.PHONY: test
test: prepare verify lint ## Run what CI runs: module checks, linters, unit, integration and end-to-end tests.
	go test -race -count=1 -timeout 30m ./...

.PHONY: prepare
prepare: modules ## Build the servers the test stack runs (etcd, kube-apiserver, IronCore) into bin/, once per version.
	@go run ./cmd/ironcore-ccm-lab prepare

# Downloading the modules in one step keeps go's "downloading" lines, one per module, off the
# terminal; they are in the log, which is shown only if the download fails.
.PHONY: modules
modules: ## Download the Go modules the project needs (once; quiet, log in bin/go-mod-download.log).
	@mkdir -p bin
	@go mod download -json > bin/go-mod-download.json 2> bin/go-mod-download.log || { \
		cat bin/go-mod-download.log; \
		echo "Could not download the Go modules (log above, and in bin/go-mod-download.log): is the module proxy reachable (GOPROXY=$$(go env GOPROXY))?"; \
		exit 1; }
	@echo "Go modules: $$(grep -c '"Path"' bin/go-mod-download.json) ready (log: bin/go-mod-download.log)"

.PHONY: build
build: ## Build the CCM binary into bin/.
	go build -o bin/ironcore-cloud-controller-manager ./cmd/ironcore-cloud-controller-manager

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run the linters.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: ## Check that go.mod and go.sum are tidy and that deploy/ is rendered from the current chart.
	go mod tidy -diff
	for dir in hack/tools/*/; do (cd $$dir && go mod tidy -diff) || exit 1; done
	cd hack/tools/helm && go run . -root ../../.. -check

.PHONY: manifests
manifests: ## Render deploy/kustomize from the Helm chart.
	go generate ./deploy

$(GOLANGCI_LINT):
	@echo "building golangci-lint $(GOLANGCI_LINT_VERSION) (about 1.5 minutes, first time only)..."
	GOBIN=$(abspath bin/.golangci-lint) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/.golangci-lint/golangci-lint $@
