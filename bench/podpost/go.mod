module pidispatch.invalid/bench/podpost

go 1.26.0
