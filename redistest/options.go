package redistest

// Option adjusts how servers are started.
type Option func(*options)

type options struct {
	args  []string
	certs *Certs // WithTLS
}

// WithArgs appends redis-server command-line arguments (such as
// "--cluster-node-timeout", "500") after the harness's own. Redis applies
// arguments in order, so a later value overrides the harness's default for
// the same directive. Arguments are not checked; a server that refuses them
// fails the start with its log in the test output.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}
