package pure

import "time"

func f(now time.Time) time.Time { return now.Add(time.Second) }
