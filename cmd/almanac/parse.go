package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/almanacdev/almanac"
)

// parseCatchUp reads --catch-up: "all", "none", "latest:N" or "latest N"
// (N from 1 to 1,000,000), the forms almanac.CatchUp's String prints.
func parseCatchUp(text string) (almanac.CatchUp, error) {
	switch text {
	case "all":
		return almanac.CatchUpAll, nil
	case "none":
		return almanac.CatchUpNone, nil
	}
	rest, ok := strings.CutPrefix(text, "latest")
	if ok {
		rest = strings.TrimLeft(rest, ": ")
		if n, err := strconv.Atoi(rest); err == nil && n >= 1 && n <= 1_000_000 && strconv.Itoa(n) == rest {
			return almanac.CatchUpLatest(n), nil
		}
	}
	return almanac.CatchUp{}, fmt.Errorf("%w: catch-up policy %q; expected all, none or latest:N with N from 1 to 1000000", almanac.ErrInvalid, text)
}

// poolers are the values of --pooler, in almanac.Pooler's order.
var poolers = []almanac.Pooler{almanac.PoolerAuto, almanac.PoolerSession, almanac.PoolerTransaction}

// parsePooler reads --pooler: auto, session or transaction, the names
// almanac.Pooler's String prints, or none (direct connections), which
// works as session does and is read as it, so that a setting written
// for earlier versions still works.
func parsePooler(text string) (almanac.Pooler, error) {
	if text == "none" {
		return almanac.PoolerSession, nil
	}
	names := make([]string, len(poolers))
	for i, p := range poolers {
		if text == p.String() {
			return p, nil
		}
		names[i] = p.String()
	}
	return 0, fmt.Errorf("%w: pooler %q: expected one of %s", almanac.ErrInvalid, text, strings.Join(names, ", "))
}
