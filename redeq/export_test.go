package redeq

// SetOlderFormat makes c, before Start, a client of the version before
// this one as to the format of the job state: it fetches only the older
// format (dropping an entry of the current one as stale, as that version
// does), writes the older format whatever the namespace's, and records no
// format it reads. Tests of a rolling upgrade run it beside current
// clients.
func SetOlderFormat(c *Client) {
	c.older = true
	c.group.SetOlderFormat()
}
