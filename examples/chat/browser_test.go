package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const clientPath = "web/node_modules/centrifuge/dist/centrifuge.js"

// TestBrowsersChatAcrossNodes loads the page from two nodes in headless
// Chromium, on each engine, types a message into the page of node-1 and
// waits for it on the page of node-2. It checks who each page lists as
// present: what a page asks the room's presence for when it subscribes
// comes from shardcast's presence manager, in Redis, whichever node added
// it. And it checks that a page reloaded mid-conversation shows what it
// missed. Set CHAT_SCREENSHOT=file.png to keep a picture of both pages
// (one file per engine, the engine's name before the extension).
func TestBrowsersChatAcrossNodes(t *testing.T) {
	browser := findChromium(t)
	if _, err := os.Stat(clientPath); err != nil {
		t.Skipf("the npm-installed centrifuge client is missing (%v); run `make chat-web` (npm ci in examples/chat/web)", err)
	}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) { testBrowsersChatAcrossNodes(t, browser, engine) })
	}
}

func testBrowsersChatAcrossNodes(t *testing.T, browser, engine string) {
	nodes := startChat(t, engine, 2, clientPath)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // Chromium refuses to start as root with its sandbox on
		chromedp.WindowSize(640, 480),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	tabA, cancelA := chromedp.NewContext(allocCtx)
	defer cancelA()
	tabB, cancelB := chromedp.NewContext(tabA) // a second tab of the same browser
	defer cancelB()
	logConsole(t, tabA, "node-1 page")
	logConsole(t, tabB, "node-2 page")

	open := func(tab context.Context, url string) {
		t.Helper()
		// The send button is enabled once the room subscription is confirmed.
		if err := chromedp.Do(tab, chromedp.Navigate(url), chromedp.WaitEnabled(chromedp.ID("send"))); err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
	}
	open(tabA, nodes[0].url+"/?name=alice")
	open(tabB, nodes[1].url+"/?name=bob")

	// Presence crosses nodes: alice's page sees bob join (a join message
	// through the broker); bob's page finds alice, added by node-1, in the
	// room's presence.
	both := []string{"alice (node-1)", "bob (node-2)"}
	waitTexts(t, tabA, "#who li", both)
	waitTexts(t, tabB, "#who li", both)

	const text = "hello from node-1"
	if err := chromedp.Do(tabA, chromedp.SendKeys(chromedp.ID("text"), text), chromedp.Click(chromedp.ID("send"))); err != nil {
		t.Fatalf("send: %v", err)
	}
	waitText(t, tabB, "#messages .message", "alice (node-1): "+text)
	waitText(t, tabA, "#messages .message", "alice (node-1): "+text)

	// Bob leaves the page and comes back: his page shows what it showed,
	// then what alice said meanwhile, from the room's history, once each
	// and in order.
	if err := chromedp.Do(tabB, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("leave the page: %v", err)
	}
	// Node-2 removes bob's presence before it publishes his leave.
	waitText(t, tabA, "#messages", "bob left")
	waitTexts(t, tabA, "#who li", []string{"alice (node-1)"})
	say := func(text string) {
		t.Helper()
		if err := chromedp.Do(tabA, chromedp.SendKeys(chromedp.ID("text"), text), chromedp.Click(chromedp.ID("send"))); err != nil {
			t.Fatalf("send: %v", err)
		}
		waitText(t, tabA, "#messages .message", "alice (node-1): "+text)
	}
	say("while bob was away")
	say("still away")
	open(tabB, nodes[1].url+"/?name=bob")
	// One bob: the entry of his first visit went with him.
	waitTexts(t, tabB, "#who li", both)
	say("welcome back")
	waitText(t, tabB, "#messages .message", "alice (node-1): welcome back")
	got, err := chromedp.Run(tabB, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#messages .message')].map(e => e.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"alice (node-1): " + text,
		"alice (node-1): while bob was away",
		"alice (node-1): still away",
		"alice (node-1): welcome back",
	}
	if !slices.Equal(got, want) {
		t.Errorf("bob's page after coming back shows\n%q\nwant\n%q", got, want)
	}

	// Alice leaves and comes back: her page, on node-1, now finds bob,
	// added by node-2, in the room's presence.
	if err := chromedp.Do(tabA, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("leave the page: %v", err)
	}
	waitTexts(t, tabB, "#who li", []string{"bob (node-2)"})
	open(tabA, nodes[0].url+"/?name=alice")
	waitTexts(t, tabA, "#who li", both)

	if path := os.Getenv("CHAT_SCREENSHOT"); path != "" {
		ext := filepath.Ext(path)
		saveScreenshots(t, strings.TrimSuffix(path, ext)+"-"+engine+ext, tabA, tabB)
	}
}

// findChromium returns the path of a Chromium or Chrome binary, or skips.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("no chromium on PATH (Debian/Ubuntu: apt-get install chromium); skipping the browser test")
	return ""
}

// waitText waits until an element matching sel has text containing want.
func waitText(t *testing.T, tab context.Context, sel, want string) {
	t.Helper()
	js := `[...document.querySelectorAll(` + jsString(sel) + `)].some(e => e.textContent.includes(` + jsString(want) + `))`
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		got, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %q in %s: %v\npage text:\n%s", want, sel, err, got)
	}
}

// waitTexts waits until the elements matching sel have exactly the texts
// want, in order.
func waitTexts(t *testing.T, tab context.Context, sel string, want []string) {
	t.Helper()
	w, _ := json.Marshal(want) // a slice of strings always marshals
	js := `JSON.stringify([...document.querySelectorAll(` + jsString(sel) + `)].map(e => e.textContent)) === ` + jsString(string(w))
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		got, _ := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll(`+jsString(sel)+`)].map(e => e.textContent)`))
		t.Fatalf("waiting for %s to be %q: %v; it is %q", sel, want, err, got)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// logConsole copies the page's console messages and uncaught exceptions to
// the test log, to explain a failure.
func logConsole(t *testing.T, tab context.Context, label string) {
	// Console starts the browser and subscribes before any page loads.
	messages := chromedp.Console(tab)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			t.Logf("%s console: %s", label, m)
		}
	})
	t.Cleanup(wg.Wait) // the iterator ends when the tab's context is cancelled
}

// saveScreenshots writes one PNG with the two pages side by side.
func saveScreenshots(t *testing.T, path string, tabs ...context.Context) {
	t.Helper()
	var shots []image.Image
	width, height := 0, 0
	for _, tab := range tabs {
		b, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		shots = append(shots, img)
		width += img.Bounds().Dx()
		height = max(height, img.Bounds().Dy())
	}
	out := image.NewRGBA(image.Rect(0, 0, width, height))
	x := 0
	for _, img := range shots {
		r := img.Bounds()
		draw.Draw(out, image.Rect(x, 0, x+r.Dx(), r.Dy()), img, r.Min, draw.Src)
		x += r.Dx()
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, out); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of both pages: %s", path)
}
