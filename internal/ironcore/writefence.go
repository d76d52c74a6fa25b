package ironcore

import "github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"

// FenceWrites makes every request that would change an IronCore object carry fence's deadline:
// it fails unsent if the deadline has passed, is abandoned if still pending at it, and none of
// its bytes are put on the wire after it, even if the process was paused after the request was
// let through. Reads and watches are not affected.
func (c *Client) FenceWrites(fence writegate.Fence) { c.writeGate.SetFence(fence) }
