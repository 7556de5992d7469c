package bpf

// The generated *_bpfel.go / *_bpfel.o files are committed; regenerate them
// with `go generate ./bpf/` (needs clang and llvm-strip: apt-get install
// clang llvm). regen.sh checks that the committed objects match the sources.
// -no-global-types: the Go mirrors of the map keys and values are written by
// hand (maps.go), one set for all objects.

//go:generate go tool bpf2go -target bpfel -no-global-types connect connect.c -- -I./include -Wall -Werror
//go:generate go tool bpf2go -target bpfel -no-global-types sockops sockops.c -- -I./include -Wall -Werror
//go:generate go tool bpf2go -target bpfel -no-global-types getsockopt getsockopt.c -- -I./include -Wall -Werror
//go:generate go tool bpf2go -target bpfel -no-global-types getpeername getpeername.c -- -I./include -Wall -Werror
//go:generate go tool bpf2go -target bpfel -no-global-types release release.c -- -I./include -Wall -Werror
//go:generate go tool bpf2go -target bpfel -no-global-types skmsg skmsg.c -- -I./include -Wall -Werror
//go:generate go tool bpf2go -target bpfel -no-global-types sklookup sklookup.c -- -I./include -Wall -Werror
//go:generate go tool bpf2go -target bpfel -no-global-types reuseport reuseport.c -- -I./include -Wall -Werror
