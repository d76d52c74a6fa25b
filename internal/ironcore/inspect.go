package ironcore

import (
	"context"
	"fmt"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NetworkInterfacesSelected returns the cached NetworkInterfaces that selector matches.
func (c *Client) NetworkInterfacesSelected(ctx context.Context, selector labels.Selector) ([]networkingv1alpha1.NetworkInterface, error) {
	list := &networkingv1alpha1.NetworkInterfaceList{}
	if err := c.cache.List(ctx, list, client.InNamespace(c.namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("list NetworkInterfaces matching %s: %w", selector, err)
	}
	return list.Items, nil
}
