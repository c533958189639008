package resp

// AppendCommand appends verb and args to b as one RESP array of bulk
// strings, the form every Redis command takes on the wire.
func AppendCommand(b []byte, verb string, args []string) []byte {
	b = AppendHeader(b, '*', len(args)+1)
	b = AppendBulk(b, verb)
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return b
}

// AppendPrefixed is AppendCommand with every arg sent as prefix+arg,
// written straight into b: a resubscribe of a million channels under a
// cluster's key prefix builds no key string.
func AppendPrefixed(b []byte, verb, prefix string, args []string) []byte {
	b = AppendHeader(b, '*', len(args)+1)
	b = AppendBulk(b, verb)
	for _, a := range args {
		b = AppendHeader(b, '$', len(prefix)+len(a))
		b = append(b, prefix...)
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// CommandLen returns how many bytes AppendPrefixed appends for verb,
// prefix and args (AppendCommand's with prefix ""), so that a caller
// writing many commands can size its buffer once instead of letting
// append copy it at every doubling.
func CommandLen(verb, prefix string, args []string) int {
	n := headerLen(len(args)+1) + headerLen(len(verb)) + len(verb) + 2
	for _, a := range args {
		k := len(prefix) + len(a)
		n += headerLen(k) + k + 2
	}
	return n
}

// headerLen returns the length of AppendHeader's output for n >= 0.
func headerLen(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return 1 + d + 2
}

// AppendBulk appends s to b as a bulk string.
func AppendBulk(b []byte, s string) []byte {
	b = AppendHeader(b, '$', len(s))
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendBulkBytes appends p to b as a bulk string.
func AppendBulkBytes(b []byte, p []byte) []byte {
	b = AppendHeader(b, '$', len(p))
	b = append(b, p...)
	return append(b, '\r', '\n')
}

// AppendHeader appends a RESP type byte and a length (as in "*3\r\n" or
// "$5\r\n") to b. A negative n is written as -1, the null length.
func AppendHeader(b []byte, kind byte, n int) []byte {
	b = append(b, kind)
	if n < 0 {
		return append(b, '-', '1', '\r', '\n')
	}
	var digits [20]byte
	i := len(digits)
	if n == 0 {
		i--
		digits[i] = '0'
	}
	for ; n > 0; n /= 10 {
		i--
		digits[i] = byte('0' + n%10)
	}
	b = append(b, digits[i:]...)
	return append(b, '\r', '\n')
}
