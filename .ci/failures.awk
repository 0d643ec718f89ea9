# Prints, from a go test -v log, what says why a test failed: each of
# testify's failure blocks (the file:line header and its tab-indented
# lines), each --- FAIL line with the last few lines a test logged before
# it (where a t.Fatalf's message is), and a panic with the lines after it.
# Lines are cut at 600 characters. make test prints it last, so that the
# end of the output, which is what a CI summary keeps, says why.
function out(line) {
	if (length(line) > 600) line = substr(line, 1, 600) "…"
	print line
}
/^[ \t]+[^ \t]+_test\.go:[0-9]+: *$/ { header = $0; next }
/^[ \t]+\t/ && header != "" { out(header); header = ""; inblock = 1 }
/^[ \t]+\t/ && inblock { out($0); next }
{ header = ""; inblock = 0 }
/^[ \t]+[^ \t]+_test\.go:[0-9]+: ./ { logged[n++ % 4] = $0 }
/^[ \t]*--- FAIL/ {
	for (i = (n > 4 ? n - 4 : 0); i < n; i++) out(logged[i % 4])
	n = 0
	out($0)
}
/^[ \t]*--- (PASS|SKIP)/ { n = 0 }
/^panic:/ { panicking = 25 }
panicking > 0 { out($0); panicking-- }
