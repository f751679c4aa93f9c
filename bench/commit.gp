# gnuplot -e "before='before.csv'; after='after.csv'; out='commit-ops.png'" bench/commit.gp
# (CSV files from bench/commit.sh --csv, one before and one after a change)
set datafile separator ','
set terminal pngcairo size 1000,620 font ',11'
set output out
set logscale xy 2
set format y '%g'
set xlabel 'nodes (simulated, one rank each)'
set ylabel 'store operations per version'
set grid
set key left top
set title 'job-wide commit: store operations per version against nodes (directory store; rados: the same within 1 %)'
is(s) = (strcol(1) eq s) ? 1 : NaN
plot before every ::1 using 2:($3 * is('dir')) with linespoints lw 2 dt 2 pt 6 title 'whole job, listing (before)', \
     after every ::1 using 2:($3 * is('dir')) with linespoints lw 2 pt 7 title 'whole job, tally (after)', \
     before every ::1 using 2:($5 * is('dir')) with linespoints lw 2 dt 2 pt 4 title 'the busiest node, listing (before)', \
     after every ::1 using 2:($5 * is('dir')) with linespoints lw 2 pt 5 title 'the busiest node, tally (after)', \
     before every ::1 using 2:($6 * is('dir')) with linespoints dt 3 pt 1 title 'names listed, whole job (before; after: none)'
