"""Foundation: conversations as input. The probe conversations every check renders (`probes`), records read from
files (`records`), and rendering them in batches under limits, in worker processes (`batches`)."""
