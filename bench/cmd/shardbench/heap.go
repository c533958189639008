package main

import "runtime"

// heapBlock is the -heap block: pointer-free memory held live by this
// variable while a run that asks for it runs, standing for the rest of a
// production server's heap (its connections' buffers and state). Go's
// collector starts a cycle each time the heap grows by what the last one
// found live (GOGC 100): in a process that holds little but the broker,
// every byte the application allocates buys collections a real server
// would not make. The block gives the pacer a server's live heap to pace
// against without adding mark work, since the collector does not scan
// memory without pointers.
var heapBlock []byte

// holdHeap makes the block mib MiB (0: none) and collects, so that the
// pacer's goal follows the new live heap from the next run's first
// allocation on. A new block's headroom is touched first, which takes a
// second or more: callers change the block as seldom as they can. A block
// already held has its headroom touched again: between runs the runtime's
// scavenger returns the idle part of it to the kernel, and the next run
// would fault those pages in inside its window.
func holdHeap(mib int) {
	if len(heapBlock) == mib<<20 {
		if mib > 0 {
			touchHeadroom(mib + mib/4)
		}
		runtime.GC()
		return
	}
	heapBlock = nil
	runtime.GC()
	if mib > 0 {
		heapBlock = make([]byte, mib<<20)
		touchHeadroom(mib + mib/4)
		runtime.GC()
	}
}

// headroomChunk keeps touchHeadroom's garbage from being optimised away.
var headroomChunk []byte

// touchHeadroom allocates mib MiB of garbage in 1 MiB chunks and writes
// every page of each. After a block of B is taken, the pacer lets the
// heap grow to about 2B before it collects, through memory the process
// has never touched: a run would spend its window on page faults (the
// kernel zeroing each new page) that a server, whose heap has cycled
// through its goal many times, does not make (a first 2 s run on a fresh
// 256 MiB block measured about twice the CPU per message of a third one).
// Going through the headroom once, to the first collection and past it,
// leaves those pages mapped and free for the run's allocations.
func touchHeadroom(mib int) {
	const page = 4096
	for range mib {
		headroomChunk = make([]byte, 1<<20)
		for i := 0; i < len(headroomChunk); i += page {
			headroomChunk[i] = 1
		}
	}
	headroomChunk = nil
}

// heldHeap returns the bytes the block holds now, for live-heap columns
// that report the process without it.
func heldHeap() uint64 { return uint64(len(heapBlock)) }
