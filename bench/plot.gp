# gnuplot -e "csv='bench.csv'; out='bench.png'" bench/plot.gp
set datafile separator ','
set terminal pngcairo size 1000,620 font ',11'
set output out
set logscale xy
set xlabel 'bytes per rank'
set ylabel 'GB/s'
set grid
set key right bottom
set title 'iofwd: bandwidth against size (medians)'
bw(bytes, s) = (s > 0) ? bytes / s / 1e9 : NaN
plot csv every ::1 using 1:(bw($1, $5)) with linespoints lw 2 title 'limit: process\_vm\_readv', \
     csv every ::1 using 1:(bw($1, $6)) with linespoints title 'plain UCX get', \
     csv every ::1 using 1:(bw($1, $3)) with linespoints lw 2 title 'io\_write (per rank, blocked time)', \
     csv every ::1 using 1:(bw($1, $15)) with linespoints title 'io\_write, one rank alone (solo)', \
     csv every ::1 using 1:(bw($1*$2, $4)) with linespoints lw 2 title 'iofwd until durable (all ranks)', \
     csv every ::1 using 1:(bw($1*$11, $7)) with linespoints title 'POSIX write+fsync (all ranks)', \
     csv every ::1 using 1:(bw($1*$11, $8)) with linespoints title 'MPI-IO write\_at\_all+sync (all ranks)'
