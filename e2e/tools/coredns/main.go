// Command coredns is CoreDNS with only the plugins the e2e suite's cluster
// DNS uses (bind, kubernetes, errors, log, health, ready, cache,
// loadbalance): CoreDNS's own main links every plugin it ships, with the
// cloud SDKs of route53, azure and clouddns, which the suite would compile
// for nothing.
// Plugins register themselves when imported; coremain.Run is CoreDNS's
// main.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
