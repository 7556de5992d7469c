package impure

import (
	"os"
	"time"
)

func f() {
	go os.Exit(0)
	_ = time.Now()
	time.Sleep(time.Second)
}
