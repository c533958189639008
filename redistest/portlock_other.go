//go:build !unix

package redistest

// lockPort has no cross-process lock on this platform: the bind probe in
// reservePort and the start retry are the only protection.
func lockPort(int) (unlock func(), locked bool, err error) {
	return func() {}, true, nil
}
