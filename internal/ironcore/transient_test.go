package ironcore

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestTransient(t *testing.T) {
	resource := schema.GroupResource{Group: "networking.ironcore.dev", Resource: "networks"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"server error", apierrors.NewInternalError(errors.New("boom")), true},
		{"unavailable", apierrors.NewServiceUnavailable("down"), true},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), true},
		{"connection refused", &url.Error{Op: "Get", URL: "https://ironcore", Err: errors.New("connect: connection refused")}, true},
		{"reset mid-answer", fmt.Errorf("read Network: %w", io.ErrUnexpectedEOF), true},
		{"wrapped server error", fmt.Errorf("IronCore Network x: cannot reach the IronCore API: %w", apierrors.NewInternalError(errors.New("boom"))), true},
		{"not found", apierrors.NewNotFound(resource, "x"), false},
		{"a certificate of an unknown authority", &url.Error{Op: "Get", URL: "https://ironcore", Err: x509.UnknownAuthorityError{}}, false},
		{"a certificate for another host", &url.Error{Op: "Get", URL: "https://ironcore", Err: x509.HostnameError{Host: "ironcore"}}, false},
		{"a host that does not resolve", &url.Error{Op: "Get", URL: "https://ironcore", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Name: "ironcore", IsNotFound: true}}}, false},
		{"a DNS server that times out", &url.Error{Op: "Get", URL: "https://ironcore", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Name: "ironcore", IsTimeout: true}}}, true},
		{"forbidden", apierrors.NewForbidden(resource, "x", errors.New("no")), false},
		{"a check's verdict", errors.New("IronCore Prefix tenant/x is IPv6, not IPv4"), false},
		{"none", nil, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
