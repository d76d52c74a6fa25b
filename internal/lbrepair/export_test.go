package lbrepair

import (
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// Newest is the copy of the Service a sync decides on, given the lister's.
func (c *Controller) Newest(listed *corev1.Service) *corev1.Service {
	key, err := toolscache.MetaNamespaceKeyFunc(listed)
	if err != nil {
		return listed
	}
	return c.newest(key, listed)
}
