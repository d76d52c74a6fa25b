package ironcore

// LabelWritesKnown counts the label writes AddLabel remembers (labelWrites), for the tests.
func (c *Client) LabelWritesKnown() int {
	c.labelled.mu.Lock()
	defer c.labelled.mu.Unlock()
	return len(c.labelled.versions)
}

// NetworkInterfaceWritesKnown counts the NetworkInterface writes the writer remembers until the
// cache shows them, for the tests.
func (c *Client) NetworkInterfaceWritesKnown() int { return len(c.nics.writtenNames()) }
