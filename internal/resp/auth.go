package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Auth logs a new connection in: it sends AUTH password (AUTH username
// password when username is set) and reads the reply, before anything else
// reads from nc. ctx bounds the exchange: its end (cancel or deadline)
// interrupts the I/O, which then fails with ctx's error. nc is left
// without a deadline. A refusal is a *ServerError; a reply other than +OK
// is ErrProtocol.
func Auth(ctx context.Context, nc net.Conn, username, password string) error {
	args := []string{password}
	if username != "" {
		args = []string{username, password}
	}
	return ExpectOK(ctx, nc, "AUTH", args)
}

// ExpectOK sends command name with args on a connection nothing else
// reads from yet and reads its reply, which must be +OK, bounded by ctx
// as Auth is.
func ExpectOK(ctx context.Context, nc net.Conn, name string, args []string) error {
	return bounded(ctx, nc, func() error { return exchangeOK(nc, name, args) })
}

// Exchange sends command name with args on a connection nothing else
// reads from yet and returns its reply as Reader.Reply decodes it, bounded
// by ctx as Auth is. An error reply is returned as the error.
func Exchange(ctx context.Context, nc net.Conn, name string, args []string) (any, error) {
	var v any
	err := bounded(ctx, nc, func() error {
		if _, err := nc.Write(AppendCommand(nil, name, args)); err != nil {
			return err
		}
		var err error
		// Nothing else is in flight, so the reader cannot take bytes
		// meant for another.
		v, err = NewReader(bufio.NewReaderSize(nc, 512)).Reply()
		if se, ok := v.(*ServerError); ok && err == nil {
			v, err = nil, se
		}
		return err
	})
	return v, err
}

// bounded runs exchange, an exchange on nc, so that ctx's end interrupts
// its I/O and is reported as ctx's error; nc is left without a deadline.
func bounded(ctx context.Context, nc net.Conn, exchange func() error) error {
	// ctx's own timer ends it at its deadline, so the func covers the
	// deadline too; no socket deadline fires before ctx reports its end.
	expired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = nc.SetDeadline(time.Now())
		close(expired)
	})
	defer func() {
		// A ctx ending as the reply arrives must not leave its expired
		// deadline on the wire: wait for the func, then clear.
		if !stop() {
			<-expired
			_ = nc.SetDeadline(time.Time{})
		}
	}()
	err := exchange()
	if _, refused := IsServerError(err); err != nil && !refused && !errors.Is(err, ErrProtocol) && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// exchangeOK writes command name with args and reads its one-line reply.
// Nothing else is in flight, so the small reader cannot take bytes meant
// for another.
func exchangeOK(nc net.Conn, name string, args []string) error {
	if _, err := nc.Write(AppendCommand(nil, name, args)); err != nil {
		return err
	}
	line, err := NewReader(bufio.NewReaderSize(nc, 512)).Line()
	if err != nil {
		return err
	}
	switch {
	case line[0] == '-':
		return &ServerError{Msg: string(line[1:])}
	case string(line) != "+OK":
		return fmt.Errorf("%w: %s answered %q", ErrProtocol, name, line)
	}
	return nil
}
