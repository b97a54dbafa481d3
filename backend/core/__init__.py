"""The ground floor: the job spec, Hub names, paths and upload names, artifacts, users and the learning verdict."""
