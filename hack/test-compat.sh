#!/usr/bin/env bash
# make test-compat: the end-to-end smoke tests against a target cluster of each supported
# Kubernetes minor version (COMPAT_VERSIONS, default 1.35 1.36 1.37), the IronCore control plane
# as it is. The first run of a version builds its kube-apiserver into bin/ (about 8 minutes).
# Not part of make test. Logs are in bin/test-logs/compat-<version>.log.
set -uo pipefail
cd "$(dirname "$0")/.."

versions=${COMPAT_VERSIONS:-1.35 1.36 1.37}
# What the CCM asks of the target cluster: Nodes (initialization, labels, deletion), Services
# and their status, EndpointSlices, events, leases, the metrics endpoint's delegated
# authentication and authorization, and the chart's manifests.
smoke='^(TestTheTargetClusterRunsTheChosenKubernetes|TestNodeLifecycle|TestNodesCarryTheirLabelsFromIronCore|TestLoadBalancerLifecycle|TestOnlyNodesThatCanServeGetTraffic|TestRoutesOfTwentyDualStackNodes|TestPodCIDRsFromIronCoreIPAM|TestLeaderElection|TestMetricsAreServedToAuthorizedScrapers|TestRenderedManifestsPassServerSideDryRun)$'

mkdir -p bin/test-logs
total_start=$SECONDS
# The modules that pin the other versions' API servers are kept tidy here, not by make test,
# which does not download them.
for dir in hack/tools/kube-*/; do
	(cd "$dir" && go mod tidy -diff) >bin/test-logs/compat-modules.log 2>&1 || {
		cat bin/test-logs/compat-modules.log
		echo "make test-compat: $dir is not tidy (or its modules could not be downloaded)"
		exit 1
	}
done
summary=()
failed=0
for version in $versions; do
	start=$SECONDS
	log=bin/test-logs/compat-$version.log
	echo "== Kubernetes $version: end-to-end smoke tests (log: $log)"
	IRONCORE_CCM_TARGET_KUBERNETES=$version go test -count=1 -timeout 30m -v -run "$smoke" ./test/e2e/ >"$log" 2>&1
	status=$?
	grep -E '^(--- (PASS|FAIL)|ok |FAIL|building|      built|.*the target cluster runs Kubernetes)' "$log" | sed 's/^/   /'
	if [ "$status" -eq 0 ]; then
		line=$(printf 'Kubernetes %-5s ok   %5ss' "$version" $((SECONDS - start)))
	else
		line=$(printf 'Kubernetes %-5s FAIL %5ss  (log: %s)' "$version" $((SECONDS - start)) "$log")
		failed=1
	fi
	summary+=("$line")
done

echo
if [ "$failed" -eq 0 ]; then
	echo "make test-compat passed in $((SECONDS - total_start))s:"
else
	echo "make test-compat failed after $((SECONDS - total_start))s:"
fi
printf '  %s\n' "${summary[@]}"
exit "$failed"
