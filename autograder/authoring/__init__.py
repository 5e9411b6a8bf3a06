"""Writing the course: the release generated from the one source (`release`), each graded cell's criteria written
from its suite (`criteria`), the known answers of each exercise (`variants`), and a new exercise's skeletons (`new`)."""
