# Two loss.csv files (step,update,loss,...): the second run's loss against the first's.
FNR == 1 { next }
FNR == NR { ref[FNR] = $3; n = FNR; next }
{
  d = $3 - ref[FNR]; if (d < 0) d = -d
  if (d > 0.05 * ref[2]) far = 1
  if ($3 != ref[FNR]) differs = 1
  if (FNR == 2) first = $3
  last = $3; steps = FNR - 1
}
END {
  printf "steps %d, within 5%%: %s, falls: %s, differs from fp32: %s\n", steps,
         far ? "no" : "yes", last < 0.9 * first ? "yes" : "no", differs ? "yes" : "no"
}
