"""Stage 4: training features. `features` turns batches of conversations into input_ids and labels
(`TrainingFeatures`), `dataset` streams a whole file into a datasets folder (`prepare`)."""
