package main

import "embed"

// webFiles holds the page. The Centrifuge client library it loads is not
// embedded: npm installs it under web/node_modules (make chat-web).
//
//go:embed web/index.html web/chat.js web/chat.css
var webFiles embed.FS
