package podcidrs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// Check confirms at start that every family's parent exists, is of the family, and is larger
// than the pod CIDRs cut from it.
func (a *Allocator) Check(ctx context.Context) error {
	if err := a.ironcore.CheckPodCIDRPrefixesReadable(ctx); err != nil {
		return err
	}
	var errs []error
	for _, family := range a.families {
		parents, err := a.ironcore.ParentPrefixes(ctx, family.ParentPrefix, family.ParentLabels)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", family.ParentKey, err))
			continue
		}
		fits := 0
		for i := range parents {
			parent := &parents[i]
			actual := ironcore.PrefixFamily(parent)
			switch {
			case family.ParentPrefix != "" && actual != "" && actual != family.Family:
				errs = append(errs, fmt.Errorf("%s: IronCore Prefix %s is %s, not %s", family.ParentKey, parent.Name, actual, family.Family))
			case actual != family.Family:
			case parent.Spec.Prefix != nil && parent.Spec.Prefix.IsValid() && parent.Spec.Prefix.Bits() >= family.MaskSize:
				if family.ParentPrefix != "" {
					errs = append(errs, fmt.Errorf("%s: IronCore Prefix %s (%s) is not larger than the pod CIDRs (/%d, %s) cut from it",
						family.ParentKey, parent.Name, parent.Spec.Prefix, family.MaskSize, family.MaskSizeKey))
				}
			default:
				fits++
			}
		}
		if family.ParentPrefix == "" && fits == 0 {
			errs = append(errs, fmt.Errorf("%s: no %s Prefix labelled %v larger than /%d exists in the namespace",
				family.ParentKey, family.Family, family.ParentLabels, family.MaskSize))
		}
	}
	return errors.Join(errs...)
}

// DiagnosePodCIDRs tells, with live reads, why IronCore may not allocate a pod CIDR of the family: its
// parent is missing, of the wrong family, or full. It returns "" when it finds no reason.
func (a *Allocator) DiagnosePodCIDRs(ctx context.Context, family corev1.IPFamily) string {
	for _, f := range a.families {
		if f.Family == family {
			return a.parentProblem(ctx, f)
		}
	}
	return ""
}

func (a *Allocator) parentProblem(ctx context.Context, family config.PodCIDRFamily) string {
	parents, err := a.ironcore.ParentPrefixes(ctx, family.ParentPrefix, family.ParentLabels)
	if err != nil {
		return fmt.Sprintf("%s: %v", family.ParentKey, err)
	}
	var names, notAllocated []string
	for i := range parents {
		parent := &parents[i]
		if actual := ironcore.PrefixFamily(parent); actual != family.Family {
			if family.ParentPrefix != "" {
				return fmt.Sprintf("%s: IronCore Prefix %s is %s, not %s", family.ParentKey, parent.Name, actual, family.Family)
			}
			continue
		}
		if parent.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated {
			notAllocated = append(notAllocated, fmt.Sprintf("%s (phase %q)", parent.Name, parent.Status.Phase))
			continue
		}
		if ironcore.HasRoomFor(parent, family.MaskSize) {
			return ""
		}
		names = append(names, fmt.Sprintf("%s (%s)", parent.Name, parent.Spec.Prefix))
	}
	if len(names) == 0 && len(notAllocated) > 0 {
		return fmt.Sprintf("%s: the parent %s is not allocated yet", family.ParentKey, strings.Join(notAllocated, ", "))
	}
	if len(names) == 0 {
		return fmt.Sprintf("%s: no %s Prefix labelled %v exists", family.ParentKey, family.Family, family.ParentLabels)
	}
	return fmt.Sprintf("%s: no free /%d is left in %s; allocation resumes when space is freed or a parent is added",
		family.ParentKey, family.MaskSize, strings.Join(names, ", "))
}
