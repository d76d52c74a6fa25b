package ironcore

import "github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"

// FenceWrites holds every write to fence's deadline: none of its bytes go on the wire after
// it, even if the process was paused after the request was let through. Reads are not affected.
func (c *Client) FenceWrites(fence writegate.Fence) { c.writeGate.SetFence(fence) }
