package resp_test

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/shardcast/shardcast/internal/resp"
)

// A command is encoded into a reusable buffer; a reply is decoded from the
// connection's bufio.Reader.
func Example() {
	b := resp.AppendCommand(nil, "SUBSCRIBE", []string{"news"})
	fmt.Printf("%q\n", b)

	server := "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n-ERR unknown command\r\n"
	rd := resp.NewReader(bufio.NewReader(strings.NewReader(server)))
	reply, _ := rd.Reply()
	fmt.Println(reply)
	reply, _ = rd.Reply()
	if se, ok := reply.(*resp.ServerError); ok {
		fmt.Println(se.Msg)
	}
	// Output:
	// "*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nnews\r\n"
	// [subscribe news 1]
	// ERR unknown command
}

// The allocation-free primitives read a pushed message in place.
func ExampleReader_Bulk() {
	push := "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n"
	rd := resp.NewReader(bufio.NewReader(strings.NewReader(push)))
	n, _ := rd.ArrayHeader()
	for range n {
		b, _, _ := rd.Bulk() // a view of the buffer, valid until the next read
		fmt.Println(string(b))
	}
	// Output:
	// message
	// news
	// hello
}
