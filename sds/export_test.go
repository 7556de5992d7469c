package sds

// Internals the external tests (package sds_test) reach.

// ParseValidationContext exposes parseValidationContext.
var ParseValidationContext = parseValidationContext

// SetStreamHook makes c call f as each stream opens.
func SetStreamHook(c *Client, f func()) { c.testHookStream = f }
