module spindle.dev

go 1.26
