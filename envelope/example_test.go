package envelope_test

import (
	"fmt"
	"time"

	"github.com/shardcast/shardcast/envelope"
)

func Example() {
	publishedAt := time.Date(2023, 11, 14, 22, 13, 20, 123456000, time.UTC)
	frame := envelope.Append(nil, publishedAt, []byte("hello"))
	fmt.Printf("% x\n", frame)

	at, payload, err := envelope.Decode(frame)
	fmt.Println(at, string(payload), err)

	_, _, err = envelope.Decode([]byte(`{"from":"a raw publisher"}`))
	fmt.Println(err)
	// Output:
	// c1 01 00 06 0a 24 18 20 22 40 68 65 6c 6c 6f
	// 2023-11-14 22:13:20.123456 +0000 UTC hello <nil>
	// envelope: bad frame: first byte is not 0xC1, not a shardcast frame
}
