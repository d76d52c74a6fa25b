# Tool versions are pinned here and only here.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

.DEFAULT_GOAL := help

# When make started, so that the demo's total time counts the downloads and builds before it.
STARTED := $(shell date +%s)
LAB := bin/ironcore-ccm-lab

# The one set of build flags for the CCM, the lab, the servers and the release
# (internal/testenv/build.go): Go's build cache keys compiled packages by their flags, so with the same
# flags and the same module versions the packages the CCM and the servers share compile once.
SHARED_BUILD := CGO_ENABLED=0 go build -trimpath -ldflags="-s -w"
# The same for go commands that compile without linking: the linter's package loading (go list
# compiles the export data it type-checks against), go run and go install of tools.
SHARED_ENV = CGO_ENABLED=0 GOFLAGS="$(strip -trimpath $(shell go env GOFLAGS))"

# The tool modules make test needs: the servers of the stack (IronCore's in a module of their own,
# internal/testenv/binaries.go says why) and the chart renderer. Those that pin the target
# cluster's API server of the other supported Kubernetes versions (hack/tools/kube-*) are for
# make test-compat only, which downloads and checks them.
TOOL_MODULES := hack/tools/servers/ hack/tools/ironcore/ hack/tools/helm/

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: lab-program ## Run the demo: local Kubernetes and IronCore control planes, the CCM at work, a report.
	@$(LAB) -started=$(STARTED) demo

.PHONY: lab
lab: lab-program ## Like demo, then keep everything running for kubectl until Ctrl-C.
	@$(LAB) -started=$(STARTED) lab

.PHONY: bench
bench: lab-program ## Measure the CCM at scale (BENCH_FLAGS, default 100 Nodes, 30 Services); the run goes to docs/benchmarks/results/.
	@$(LAB) $(BENCH_FLAGS) bench

.PHONY: bench-page
bench-page: lab-program ## Regenerate the benchmark page's table and plots from the runs in docs/benchmarks/results/.
	@$(LAB) page

.PHONY: chaos
chaos: lab-program ## Prove the CCM under churn and faults, in the default mode then selector mode (CHAOS_FLAGS, default 1000 Services, 20 Nodes, 5 waves); results in docs/reliability/.
	@$(LAB) $(CHAOS_FLAGS) chaos

.PHONY: test
test: modules ## Run what CI runs: module checks, server builds, linters, unit, integration and end-to-end tests.
	@hack/test.sh

.PHONY: test-compat
test-compat: modules ## Run the end-to-end smoke tests against a target cluster of Kubernetes 1.35, 1.36 and 1.37 (COMPAT_VERSIONS); not part of make test.
	@hack/test-compat.sh

.PHONY: prepare
prepare: lab-program ## Build the servers the test stack runs (etcd, kube-apiserver, IronCore) into bin/, once per version.
	@$(LAB) prepare

# The program behind demo, lab, bench and prepare, compiled together with the CCM, which the
# demo builds again (a link only) into its stack's directory: one go build compiles the
# packages they share once, and the servers' build (prepare) reuses most of them.
.PHONY: lab-program
lab-program: modules
	@echo "compiling ironcore-ccm-lab and the CCM (the first time 2-5 minutes on 2 cores, most of it the Kubernetes libraries)..."
	@$(SHARED_BUILD) -buildvcs=auto -o bin/ ./cmd/ironcore-ccm-lab ./cmd/ironcore-cloud-controller-manager

# Downloading the modules in one step keeps go's "downloading" lines, one per module, off the
# terminal; they are in the log, which is shown only if a download fails. The tool modules
# under hack/tools pin the servers the stack builds; all are downloaded at once.
.PHONY: modules
modules: check-go ## Download the Go modules the project and its servers need (once; quiet, log in bin/go-mod-download.log).
	@hack/download-modules.sh . $(TOOL_MODULES)

.PHONY: check-go
check-go:
	@hack/check-go.sh

.PHONY: build
build: check-go ## Build the CCM binary into bin/.
	$(SHARED_BUILD) -buildvcs=auto -o bin/ironcore-cloud-controller-manager ./cmd/ironcore-cloud-controller-manager

.PHONY: release
release: check-go ## Build a release into bin/release/: the static binaries, the image (OCI layout, and image.tar for docker load) tagged with their version, and the chart with that appVersion.
	@mkdir -p bin/release
	GOOS=linux $(SHARED_BUILD) -buildvcs=auto -o bin/release/ ./cmd/ironcore-cloud-controller-manager ./cmd/ironcore-ccm-inspect
	$(SHARED_ENV) go run ./cmd/ironcore-ccm-release -binaries bin/release -out bin/release -arch $$(go env GOARCH)

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run the linters.
	$(SHARED_ENV) $(GOLANGCI_LINT) run --allow-parallel-runners ./...

.PHONY: verify
verify: ## Check that go.mod and go.sum are tidy and that deploy/ is rendered from the current chart.
	go mod tidy -diff
	for dir in $(TOOL_MODULES); do (cd $$dir && go mod tidy -diff) || exit 1; done
	cd hack/tools/helm && $(SHARED_ENV) go run . -root ../../.. -check

.PHONY: manifests
manifests: ## Render deploy/kustomize from the Helm chart.
	go generate ./deploy

$(GOLANGCI_LINT):
	@echo "building golangci-lint $(GOLANGCI_LINT_VERSION) (about 1.5 minutes, first time only)..."
	$(SHARED_ENV) GOBIN=$(abspath bin/.golangci-lint) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/.golangci-lint/golangci-lint $@
