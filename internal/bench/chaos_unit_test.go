package bench

import "testing"

// TestStartupLookupFault: a replica whose framework start-up could not read the authentication
// configuration through a fault the target API injected (a 500, a reset stream) ended as the
// run means it to; any other end of it is a problem.
func TestStartupLookupFault(t *testing.T) {
	for _, tc := range []struct {
		last string
		want bool
	}{
		{`unable to load configmap based request-header-client-ca-file: ... injected failure`, true},
		{`unable to load configmap based request-header-client-ca-file: Get "https://127.0.0.1:45363/...": stream error: stream ID 1; INTERNAL_ERROR; received from peer`, true},
		{`unable to load configmap based request-header-client-ca-file: configmaps "extension-apiserver-authentication" is forbidden`, false},
		{`panic: runtime error: invalid memory address`, false},
	} {
		if got := startupLookupFault(tc.last); got != tc.want {
			t.Errorf("startupLookupFault(%q) = %v, want %v", tc.last, got, tc.want)
		}
	}
}
