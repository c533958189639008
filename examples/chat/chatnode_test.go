package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValidRoom(t *testing.T) {
	for channel, want := range map[string]bool{
		"chat:lobby":                      true,
		"chat:a-b_9":                      true,
		"chat:" + strings.Repeat("a", 32): true,
		"chat:" + strings.Repeat("a", 33): false,
		"chat:":                           false,
		"chat:Lobby":                      false,
		"chat:a b":                        false,
		"lobby":                           false,
		"news:lobby":                      false,
		"chat:lobby:x":                    false,
	} {
		if got := validRoom(channel); got != want {
			t.Errorf("validRoom(%q) = %v, want %v", channel, got, want)
		}
	}
}

func TestCleanName(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"alice", "alice", true},
		{"  Zoë  ", "Zoë", true},
		{strings.Repeat("é", 32), strings.Repeat("é", 32), true},
		{strings.Repeat("é", 33), "", false},
		{"", "", false},
		{"   ", "", false},
		{"a\x00b", "", false},
		{"a\nb", "", false},
		{"\xff", "", false},
	} {
		got, ok := cleanName(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("cleanName(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMessage(t *testing.T) {
	c := &chatNode{name: "node-7"}
	data, err := c.message("alice", []byte(`{"text":"  hi there "}`))
	if err != nil {
		t.Fatal(err)
	}
	var m chatMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.User != "alice" || m.Node != "node-7" || m.Text != "hi there" || m.At.IsZero() {
		t.Errorf("message = %+v", m)
	}
	for _, bad := range []string{
		`{"text":""}`,
		`{"text":"   "}`,
		`{"text":"` + strings.Repeat("x", maxTextRunes+1) + `"}`,
		`{"text":5}`,
		`not json`,
	} {
		if _, err := c.message("alice", []byte(bad)); err == nil {
			t.Errorf("message(%.40q) accepted", bad)
		}
	}
}
